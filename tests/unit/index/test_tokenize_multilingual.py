"""The multilingual lexical analysis: English unchanged, other languages stemmed by their own
Snowball stemmer, CJK segmented into bigrams, the configuration stored with the shard."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.multilingual import MULTILINGUAL, own_language_first
from index.bm25_shards import LexicalShard
from index.tokenize import Tokenizer

CISI = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "cisi" / "corpus.jsonl"
MULTI = Tokenizer(multilingual=True)


def test_english_terms_are_identical_with_the_option_on() -> None:
    texts = ["The Running DOGS of Straße_1, café!", "aerodynamic heating of the boundary layers", "x"]
    if CISI.exists():
        texts += [json.loads(line)["text"] for line in CISI.read_text().splitlines()[:300]]
    for text in texts:
        assert MULTI.tokenize(text) == Tokenizer().tokenize(text)


def test_an_index_without_the_option_stores_what_it_always_did() -> None:
    assert Tokenizer().config() == {"stem": True, "stop_words": True, "language": "english"}
    assert Tokenizer.from_config(MULTI.config()) == MULTI


def test_other_languages_get_their_own_stemmer() -> None:
    assert MULTI.tokenize("Die Schlüssel werden täglich gewechselt und geprüft") == [
        "die", "schlussel", "werd", "taglich", "gewechselt", "und", "gepruft"
    ]  # fmt: skip
    # Too short to tell: the configured language, stop words and all.
    assert MULTI.tokenize("les clés") == Tokenizer().tokenize("les clés")


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        ("数据库备份", ["数据", "据库", "库备", "备份"]),
        ("バックアップ", ["バッ", "ック", "クア", "アッ", "ップ"]),
        ("鍵", ["鍵"]),
        ("backup 备份 daily", ["backup", "daili", "备份"]),
    ],
)
def test_cjk_runs_become_bigrams(text: str, terms: list[str]) -> None:
    assert MULTI.tokenize(text) == terms


def test_each_query_finds_its_own_language_document_first() -> None:
    assert own_language_first(MULTI) == {lang: True for lang, _, _ in MULTILINGUAL}
    # Without segmentation a Chinese or Japanese query matches nothing in its document.
    plain = own_language_first(Tokenizer())
    assert not plain["zh"] and not plain["ja"]


def test_the_shard_keeps_the_analysis_for_its_queries(tmp_path: Path) -> None:
    texts = [doc for _, doc, _ in MULTILINGUAL]
    LexicalShard.build(texts, np.arange(len(texts)), MULTI).save(tmp_path)
    loaded = LexicalShard.load(tmp_path)
    assert loaded.tokenizer == MULTI
    _scores, positions = loaded.search("签名密钥多久轮换一次", 1, allowed=None)
    assert positions.tolist() == [4]


def test_the_setting_reaches_the_tokenizer_builds_and_queries_use() -> None:
    from core.settings import Settings
    from wiring.index import lexical_tokenizer

    assert lexical_tokenizer(Settings()) == Tokenizer()
    on = Settings(index={"lexical_multilingual": True})
    assert lexical_tokenizer(on) == MULTI


def test_a_query_language_replaces_detection() -> None:
    # "les clés" is too short to detect (English analysis); named French, it is stemmed as such.
    assert MULTI.tokenize("les clés", language="fr") == ["le", "clé"]
    assert MULTI.tokenize("Häusern", language="de") == MULTI.tokenize("Häuser", language="de") == ["haus"]
    assert MULTI.tokenize("Häusern") != ["haus"]  # one word: detection declines, English applies
    # An English-only index has only English terms: the hint changes nothing there.
    assert Tokenizer().tokenize("Häusern", language="de") == Tokenizer().tokenize("Häusern")


def test_the_wire_model_names_exactly_the_stemmed_languages() -> None:
    from typing import get_args

    from index.tokenize import SNOWBALL
    from ragline_client.models import QueryLanguage

    assert set(get_args(QueryLanguage)) == set(SNOWBALL)

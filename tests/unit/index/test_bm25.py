"""LexicalShard against rank_bm25's BM25Okapi as the oracle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from index.bm25_shards import LexicalShard
from index.tokenize import Tokenizer

TOK = Tokenizer(stem=False, stop_words=False)
K1, B = 0.9, 0.4


@pytest.fixture(scope="module")
def texts() -> list[str]:
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(300)]
    probs = 1 / np.arange(1, 301) ** 1.1
    probs /= probs.sum()
    return [" ".join(rng.choice(words, size=int(rng.integers(3, 30)), p=probs)) for _ in range(400)]


@pytest.fixture(scope="module")
def shard(texts: list[str]) -> LexicalShard:
    return LexicalShard.build(texts, np.arange(len(texts)) + 500, TOK, k1=K1, b=B, method="robertson")


@pytest.mark.parametrize("query", ["w5 w17", "w40 w41 w200", "w30 w30 w90", "w150"])
def test_scores_match_bm25okapi_up_to_a_constant(shard: LexicalShard, texts: list[str], query: str) -> None:
    corpus = [TOK.tokenize(t) for t in texts]
    # Precondition of the equivalence: every query term is in under half the documents
    # (above that, Robertson idf is clamped to 0 by bm25s and floored by BM25Okapi).
    assert all(sum(term in doc for doc in corpus) < len(corpus) / 2 for term in TOK.tokenize(query))
    oracle = BM25Okapi(corpus, k1=K1, b=B).get_scores(TOK.tokenize(query))
    scores, positions = shard.search(query, len(texts), allowed=None)
    assert set(positions.tolist()) == set(np.flatnonzero(oracle > 0).tolist())
    # bm25s "robertson" leaves out BM25Okapi's (k1 + 1) factor: same ranking, scaled scores.
    np.testing.assert_allclose(scores * (K1 + 1), oracle[positions], rtol=1e-4)
    np.testing.assert_allclose(np.sort(scores)[::-1] * (K1 + 1), np.sort(oracle[oracle > 0])[::-1], rtol=1e-4)


def test_mask_never_leaks(shard: LexicalShard) -> None:
    rng = np.random.default_rng(1)
    for _ in range(20):
        allowed = rng.random(shard.ntotal) < 0.1
        _, positions = shard.search("w1 w2 w3 w10", 50, allowed=allowed)
        assert allowed[positions].all()
    _, none = shard.search("w1", 5, allowed=np.zeros(shard.ntotal, bool))
    assert len(none) == 0


def test_zero_score_fillers_dropped_and_k_respected(shard: LexicalShard) -> None:
    scores, positions = shard.search("w250", 1000, allowed=None)
    assert 0 < len(positions) < shard.ntotal and (scores > 0).all()
    scores, positions = shard.search("w8 w9", 5, allowed=None)
    assert len(positions) == 5 and np.all(np.diff(scores) <= 0)


def test_unknown_and_empty_queries_return_nothing(shard: LexicalShard) -> None:
    assert len(shard.search("zzz unknown", 5, allowed=None)[1]) == 0
    assert len(shard.search("", 5, allowed=None)[1]) == 0
    assert len(shard.search("zzz w5", 5, allowed=None)[1]) > 0


def test_save_load_mmap_round_trip(shard: LexicalShard, tmp_path: Path) -> None:
    shard.save(tmp_path)
    loaded = LexicalShard.load(tmp_path, mmap=True)
    assert loaded.tokenizer == TOK and loaded.vocab_size == shard.vocab_size
    np.testing.assert_array_equal(loaded.row_ids, shard.row_ids)
    allowed = np.random.default_rng(2).random(shard.ntotal) < 0.5
    for query in ("w5 w17", "w2 zzz"):
        want, got = shard.search(query, 20, allowed=allowed), loaded.search(query, 20, allowed=allowed)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_allclose(got[0], want[0])


@pytest.mark.parametrize("texts", [[], ["", "  ", "!!"]])
def test_empty_shards_search_to_nothing(texts: list[str], tmp_path: Path) -> None:
    empty = LexicalShard.build(texts, np.arange(len(texts)), Tokenizer())
    assert len(empty.search("anything", 3, allowed=None)[1]) == 0
    empty.save(tmp_path)
    assert LexicalShard.load(tmp_path).ntotal == len(texts)


def test_serving_variant_finds_terms_common_to_a_tiny_segment() -> None:
    """A fresh-writes delta of one or two documents: every term is in most documents."""
    one = LexicalShard.build(["signing keys rotation"], np.array([7]), Tokenizer())
    scores, positions = one.search("rotate signing keys", 5, allowed=None)
    assert positions.tolist() == [0] and scores[0] > 0
    two = LexicalShard.build(["signing keys", "signing bonus"], np.array([1, 2]), Tokenizer())
    _, positions = two.search("signing keys", 5, allowed=None)
    assert positions.tolist()[0] == 0 and len(positions) == 2


def test_method_survives_save_and_load(tmp_path) -> None:
    shard = LexicalShard.build(
        ["alpha beta", "beta gamma"], np.array([1, 2]), Tokenizer(), method="robertson"
    )
    shard.save(tmp_path)
    assert LexicalShard.load(tmp_path).method == "robertson"

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import ConfigError
from rerank import load_beir, pairs_from_corpus, pairs_from_qrels

CORPUS = {
    "d1": "wing lift in a propeller slipstream",
    "d2": "slipstream effects on wing lift at high angles of attack",
    "d3": "lift of a swept wing in a slipstream",
    "d4": "boundary layer transition on a flat plate",
    "d5": "heat transfer in hypersonic boundary layer flow",
    "d6": "propeller noise and slipstream",
    "d7": "wing flutter at transonic speed",
    "d8": "",
}
QUERIES = {"q1": "wing lift slipstream", "q2": "boundary layer", "q3": "unjudged query"}
QRELS = {"q1": {"d1": 3, "d2": 1, "d6": 0}, "q2": {"d4": 2, "d8": 4}, "q9": {"d1": 1}}


def test_negatives_exclude_judged_positives() -> None:
    pairs = pairs_from_qrels(CORPUS, QUERIES, QRELS, negatives_per_positive=2, seed=0)
    for qid, query in QUERIES.items():
        judged = {CORPUS[d] for d, grade in QRELS.get(qid, {}).items() if grade >= 1}
        negatives = [p.passage for p in pairs if p.query == query and p.label == 0.0]
        positives = {p.passage for p in pairs if p.query == query and p.label == 1.0}
        assert positives == {t for t in judged if t}
        assert not judged & set(negatives)
        assert len(negatives) <= 2 * len(positives)
    q1_negatives = {p.passage for p in pairs if p.query == QUERIES["q1"] and p.label == 0.0}
    assert q1_negatives and q1_negatives <= {CORPUS["d3"], CORPUS["d6"], CORPUS["d7"]}


def test_qrels_mining_is_deterministic_with_a_seed() -> None:
    first = pairs_from_qrels(CORPUS, QUERIES, QRELS, negatives_per_positive=1, seed=3)
    assert first == pairs_from_qrels(CORPUS, QUERIES, QRELS, negatives_per_positive=1, seed=3)


def test_corpus_mining_uses_titles_and_never_the_own_body() -> None:
    docs = [
        ("wing lift", "wing lift measured in a wind tunnel at low speed"),
        ("slipstream", "slipstream behind a propeller changes wing lift"),
        ("", "Boundary layers thicken downstream. The flat plate case is classic wing lift work."),
        ("flutter", "flutter of a wing at transonic speed"),
        ("noise", "noise of a propeller"),
    ]
    pairs = pairs_from_corpus(docs, negatives_per_positive=2, seed=1)
    assert pairs == pairs_from_corpus(docs, negatives_per_positive=2, seed=1)
    own = {"wing lift": docs[0][1], "Boundary layers thicken downstream.": docs[2][1].split(". ", 1)[1]}
    for query, body in own.items():
        assert (query, body, 1.0) in {(p.query, p.passage, p.label) for p in pairs}
        assert body not in {p.passage for p in pairs if p.query == query and p.label == 0.0}
    assert len(pairs_from_corpus(docs, negatives_per_positive=2, seed=1, max_pairs=4)) <= 4


def test_title_repeated_in_body_is_stripped_from_the_positive() -> None:
    pairs = pairs_from_corpus([("wing lift .", "wing lift . measured in a tunnel"), ("a", "b")], seed=0)
    assert ("wing lift .", "measured in a tunnel") in {(p.query, p.passage) for p in pairs}


def _write_beir(root: Path) -> None:
    (root / "qrels").mkdir(parents=True)
    docs = [{"_id": "1", "title": "T", "text": "body"}, {"_id": "2", "title": "", "text": ""}]
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    (root / "queries.jsonl").write_text(json.dumps({"_id": "7", "text": "q"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n7\t1\t2\n7\t2\t0\n")


def test_load_beir(tmp_path: Path) -> None:
    _write_beir(tmp_path / "tiny")
    collection = load_beir(tmp_path / "tiny")
    assert collection.name == "tiny"
    assert collection.queries == {"7": "q"}
    assert collection.qrels == {"7": {"1": 2, "2": 0}}
    assert collection.corpus == {"1": "T\nbody"}


def test_load_beir_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_beir(tmp_path)


def test_load_cranfield(shared_data: Path) -> None:
    collection = load_beir(shared_data / "cranfield")
    assert len(collection.docs) == 1400
    assert len(collection.queries) == 225
    assert sum(len(v) for v in collection.qrels.values()) == 1837

"""Tests for core.ir_metrics: hand-computed answers, an optional ranx oracle, BEIR loading."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from core.ir_metrics import (
    doc_scores_from_chunks,
    evaluate_run,
    load_beir,
    mrr_at_k,
    ndcg_at_k,
    recall_at_k,
)

# Graded example. Relevant: d1 (3), d2 (2), d4 (1); d3 is judged non-relevant (0).
GRADED = {"d1": 3, "d2": 2, "d3": 0, "d4": 1}
RANKING = ["d3", "d1", "d5", "d2", "d4"]
# IDCG@3 = IDCG@5 = 3/log2(2) + 2/log2(3) + 1/log2(4) = 3 + 1.2618595 + 0.5 = 4.7618595
# DCG@3 = 0/log2(2) + 3/log2(3) + 0/log2(4) = 1.8927893           -> nDCG@3 = 0.3974895
# DCG@5 = 1.8927893 + 2/log2(5) + 1/log2(6)
#       = 1.8927893 + 0.8613531 + 0.3868528 = 3.1409952           -> nDCG@5 = 0.6596153


def test_ndcg_graded_by_hand() -> None:
    assert ndcg_at_k(RANKING, GRADED, 3) == pytest.approx(0.3974895, abs=1e-7)
    assert ndcg_at_k(RANKING, GRADED, 5) == pytest.approx(0.6596153, abs=1e-7)
    assert ndcg_at_k(["d1", "d2", "d4"], GRADED, 3) == pytest.approx(1.0)
    # Linear gain (trec_eval), not 2^g - 1: swapping d1 (3) and d2 (2) at ranks 1-2 costs
    # (3 - 2) * (1 - 1/log2(3)) / 4.7618595 = 0.3690702 / 4.7618595 = 0.0775055.
    assert ndcg_at_k(["d2", "d1", "d4"], GRADED, 3) == pytest.approx(1 - 0.0775055, abs=1e-7)


def test_ndcg_binary_by_hand() -> None:
    qrels = {"a": 1, "b": 1}
    # DCG@4 = 1/log2(4) + 1/log2(5) = 0.5 + 0.4306766; IDCG = 1 + 1/log2(3) = 1.6309298
    assert ndcg_at_k(["x", "y", "b", "a"], qrels, 4) == pytest.approx(0.5706417, abs=1e-7)
    assert ndcg_at_k(["x", "y", "b", "a"], qrels, 2) == 0.0
    assert ndcg_at_k([], qrels, 10) == 0.0
    assert ndcg_at_k(["a"], {"a": 0}, 10) == 0.0  # no relevant document: defined as 0


def test_recall_and_mrr_by_hand() -> None:
    assert recall_at_k(RANKING, GRADED, 3) == pytest.approx(1 / 3)  # d1 of {d1, d2, d4}
    assert recall_at_k(RANKING, GRADED, 5) == 1.0
    assert recall_at_k(RANKING, {"d3": 0}, 5) == 0.0
    assert mrr_at_k(RANKING, GRADED, 1) == 0.0  # d3 has grade 0: not relevant
    assert mrr_at_k(RANKING, GRADED, 3) == 0.5
    assert mrr_at_k(["x", "y", "b", "a"], {"a": 1, "b": 1}, 10) == pytest.approx(1 / 3)


def test_duplicate_ids_count_once() -> None:
    # The repeated d1 is dropped, so d2 moves up to rank 2: DCG = 3 + 2/log2(3), as if unrepeated.
    assert ndcg_at_k(["d1", "d1", "d2"], GRADED, 3) == ndcg_at_k(["d1", "d2"], GRADED, 3)
    assert recall_at_k(["d1", "d1", "d2"], GRADED, 2) == pytest.approx(2 / 3)


def test_invalid_k_raises() -> None:
    with pytest.raises(ValueError):
        ndcg_at_k(RANKING, GRADED, 0)
    with pytest.raises(ValueError):
        evaluate_run({"q": RANKING}, {"q": GRADED}, [])


def test_evaluate_run_means_and_skips() -> None:
    run = {"q1": RANKING, "q2": ["x", "y", "b", "a"], "q3": ["z"], "q5": ["a"]}
    qrels = {"q1": GRADED, "q2": {"a": 1, "b": 1}, "q3": {"z": 0}, "q4": {"a": 2}}
    result = evaluate_run(run, qrels, ks=[5, 3])
    # q3 (only a grade-0 judgement) and q5 (no judgements) are skipped; q4 is judged but
    # missing from the run, so it scores 0.
    assert result.skipped_query_ids == ("q3", "q5")
    assert (result.num_evaluated, result.num_skipped) == (3, 2)
    assert result.ks == (3, 5)
    assert result.per_query["q4"][5].ndcg == 0.0
    # nDCG@5 per query: q1 0.6596153, q2 0.5706417 (DCG@4 = DCG@5), q4 0 -> mean 0.4100857
    assert result.mean[5].ndcg == pytest.approx((0.6596153 + 0.5706417) / 3, abs=1e-7)
    # MRR@3: q1 1/2, q2 1/3, q4 0 -> 5/18
    assert result.mean[3].mrr == pytest.approx(5 / 18)
    assert result.table()["recall@5"] == pytest.approx((1.0 + 1.0 + 0.0) / 3)
    with pytest.raises(ValueError):
        evaluate_run({"q3": ["z"]}, {"q3": {"z": 0}}, [10])


def test_doc_scores_from_chunks() -> None:
    hits = [("a", 0.9), ("b", 0.8), ("b", 0.7), ("c", 0.5), ("c", 0.45), ("c", 0.4), ("d", 0.9)]
    # max: a 0.9, d 0.9 (tie, a seen first), b 0.8, c 0.5
    assert doc_scores_from_chunks(hits, "max") == ["a", "d", "b", "c"]
    # sum: c 1.35, b 1.5, a 0.9, d 0.9
    assert doc_scores_from_chunks(hits, "sum") == ["b", "c", "a", "d"]
    assert doc_scores_from_chunks([], "max") == []
    with pytest.raises(ValueError):
        doc_scores_from_chunks(hits, "mean")  # type: ignore[arg-type]


def _random_case(
    rng: random.Random, graded: bool
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, int]]]:
    run: dict[str, dict[str, float]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for q in range(30):
        docs = [f"d{i}" for i in range(40)]
        judged = rng.sample(docs, rng.randint(1, 15))
        qrels[f"q{q}"] = {d: rng.randint(0, 3) if graded else rng.randint(0, 1) for d in judged}
        qrels[f"q{q}"][judged[0]] = max(1, qrels[f"q{q}"][judged[0]])
        retrieved = rng.sample(docs, rng.randint(0, 30))
        run[f"q{q}"] = {d: float(len(retrieved) - i) for i, d in enumerate(retrieved)}  # distinct scores
    return run, qrels


@pytest.mark.slow  # the first ranx call JIT-compiles with numba (~30 s, then cached)
@pytest.mark.parametrize("graded", [True, False])
def test_matches_ranx_on_random_runs(graded: bool) -> None:
    ranx = pytest.importorskip("ranx")
    run, qrels = _random_case(random.Random(7 + graded), graded)
    ks = (1, 5, 10, 20)
    ours = evaluate_run({q: list(docs) for q, docs in run.items()}, qrels, ks)
    # ranx drops empty rankings, so give every query at least a non-judged document.
    ranx_run = ranx.Run({q: docs or {"none": 1.0} for q, docs in run.items()})
    metrics = [f"{name}@{k}" for k in ks for name in ("ndcg", "recall", "mrr")]
    theirs = ranx.evaluate(ranx.Qrels(qrels), ranx_run, metrics, return_mean=False, make_comparable=True)
    query_ids = sorted(ranx_run.keys())
    for k in ks:
        for name in ("ndcg", "recall", "mrr"):
            expected = dict(zip(query_ids, theirs[f"{name}@{k}"], strict=True))
            for q in ours.per_query:
                assert getattr(ours.per_query[q][k], name) == pytest.approx(expected[q], abs=1e-9), (
                    q,
                    name,
                    k,
                )


def test_load_beir_small(tmp_path: Path) -> None:
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text(
        json.dumps({"_id": "1", "title": "T", "text": "first", "metadata": {"y": 1}})
        + "\n\n"
        + json.dumps({"_id": 2, "text": "second"})
        + "\n"
    )
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "what"}) + "\n")
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\t1\t2\nq1\t2\t0\n")
    collection = load_beir(tmp_path)
    docs = list(collection.iter_corpus())
    assert [(d.doc_id, d.title, d.text) for d in docs] == [("1", "T", "first"), ("2", "", "second")]
    assert docs[0].metadata == {"y": 1}
    assert collection.queries == {"q1": "what"}
    assert collection.qrels == {"q1": {"1": 2, "2": 0}}
    with pytest.raises(FileNotFoundError):
        load_beir(tmp_path, split="dev")
    (tmp_path / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq1\t1\thigh\n")
    with pytest.raises(ValueError, match="dev.tsv:2"):
        load_beir(tmp_path, split="dev")


@pytest.mark.parametrize(
    ("name", "docs", "queries", "judged"), [("cisi", 1460, 112, 76), ("cranfield", 1400, 225, 225)]
)
def test_shared_collections(shared_data: Path, name: str, docs: int, queries: int, judged: int) -> None:
    if not (shared_data / name).is_dir():
        pytest.skip(f"{name} is absent")
    collection = load_beir(shared_data / name)
    assert sum(1 for _ in collection.iter_corpus()) == docs
    assert len(collection.queries) == queries
    # The ideal run (judged documents by grade) scores 1 on every evaluable query.
    ideal = {
        q: sorted(judged_docs, key=lambda d: -judged_docs[d]) for q, judged_docs in collection.qrels.items()
    }
    run = {q: ideal.get(q, []) for q in collection.queries}
    result = evaluate_run(run, collection.qrels, [10])
    assert result.num_evaluated == judged
    assert result.num_skipped == queries - judged
    assert result.mean[10].ndcg == pytest.approx(1.0)
    assert result.mean[10].mrr == pytest.approx(1.0)

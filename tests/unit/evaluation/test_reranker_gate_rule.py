"""The reranker gate's rule on pure numbers: on only when no worse (``passes``) and when it
reranks within the serving budget (``refusals``, issue 44)."""

from __future__ import annotations

import pytest

from cli.reranker import format_gate
from evaluation import cv
from evaluation.reranker_gate import MIN_RERANKED_SHARE, TOLERANCE, GateLatency, GateReport, passes, refusals


@pytest.mark.parametrize(
    ("mean", "interval", "expected"),
    [
        (0.0, (0.0, 0.0), True),  # changes no ranking: no worse
        (0.03, (0.01, 0.05), True),  # a clear gain
        (0.01, (-TOLERANCE, 0.03), True),  # a plausible loss no larger than the tolerance
        (0.01, (-0.0051, 0.03), False),  # a gain on average, but a plausible loss beyond it
        (-0.001, (-0.004, 0.002), False),  # worse on average, however slightly
        (-0.05, (-0.08, -0.02), False),  # a clear loss
    ],
)
def test_the_rule(mean: float, interval: tuple[float, float], expected: bool) -> None:
    assert passes(mean, interval) is expected


def test_the_rule_on_paired_differences_through_the_shared_bootstrap() -> None:
    # Two queries of twenty lose a lot, the rest gain a little: the mean is positive, but the
    # interval reaches far below the tolerance, so the gate keeps the reranker off.
    noisy = [0.02] * 18 + [-0.15, -0.15]
    low, high = cv.bootstrap_interval(noisy, seed=0)
    assert cv.mean(noisy) > 0 and low < -TOLERANCE
    assert not passes(cv.mean(noisy), (low, high))
    steady = [0.02] * 18 + [0.0, 0.01]
    assert passes(cv.mean(steady), cv.bootstrap_interval(steady, seed=0))


def test_a_model_that_reranked_nothing_is_refused_though_its_ndcg_is_unchanged() -> None:
    # Issue 44: every judged query ran over the budget, so each "with" answer was the fused
    # order: nDCG equal, "no worse", and the quality rule alone passed it.
    over = GateLatency.of([1502.3, 1500.9, 1501.7, 1500.4, 1503.0], reranked=0, budget_ms=1500)
    assert passes(0.0, (0.0, 0.0))
    assert (over.reranked_share, over.p50_ms, over.p95_ms) == (0.0, 1501.7, 1503.0)
    assert refusals(over) == [
        "only 0 of 5 judged queries were reranked within the 1500 ms budget (at least 95% must be)",
        "rerank p95 1503 ms is over the 1500 ms budget",
    ]


@pytest.mark.parametrize(
    ("rerank_ms", "reranked", "refused"),
    [
        ([40.0] * 20, 20, 0),  # fast and every answer reranked
        ([40.0] * 19 + [1501.0], 19, 0),  # one slow query of twenty: 95% reranked, p95 in budget
        ([40.0] * 18 + [1501.0] * 2, 18, 2),  # two of twenty: fewer than 95%, and the p95 is over
        ([900.0] * 20, 19, 0),  # in budget, one answer failed unreranked: 95% reranked
        ([900.0] * 20, 18, 1),  # in budget, but two failed: fewer than 95% reranked
    ],
)
def test_refusals_count_unreranked_answers_and_the_p95(
    rerank_ms: list[float], reranked: int, refused: int
) -> None:
    latency = GateLatency.of(rerank_ms, reranked=reranked, budget_ms=1500)
    assert len(refusals(latency)) == refused
    assert (latency.reranked_share >= MIN_RERANKED_SHARE) == (reranked >= 19)


def test_the_printed_report_gives_the_latency_budget_and_why_it_was_refused() -> None:
    latency = GateLatency.of([1501.0] * 16, reranked=0, budget_ms=1500)
    report = GateReport(
        tenant="t", model="/m/slow-rr", sources=["ds"], queries=16, top_k=10, candidates=50, blend="rrf",
        ndcg_without=0.9, ndcg_with=0.9, ndcg_difference=0.0, interval=(0.0, 0.0), passed=False,
        enabled=False, forced_off=False, unreranked_queries=16, latency=latency, refused=refusals(latency),
    )  # fmt: skip
    text = format_gate(report)
    assert (
        "rerank latency per query: p50 1501 ms, p95 1501 ms (budget 1500 ms); 0 of 16 reranked (0%)" in text
    )
    assert "refused: only 0 of 16 judged queries were reranked" in text and "gate FAILED" in text
    assert report.as_json()["latency"] == {
        "budget_ms": 1500, "p50_ms": 1501.0, "p95_ms": 1501.0, "queries": 16, "reranked": 0,
        "reranked_share": 0.0,
    }  # fmt: skip

"""The reranker gate's rule on pure numbers: on only when no worse (``passes``)."""

from __future__ import annotations

import pytest

from evaluation import cv
from evaluation.reranker_gate import TOLERANCE, passes


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

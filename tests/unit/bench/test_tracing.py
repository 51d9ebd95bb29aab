"""bench.tracing's summary of side-by-side rounds."""

from __future__ import annotations

import math

import pytest

from bench.tracing import _geometric_interval


def test_the_geometric_mean_of_ratios_and_its_interval() -> None:
    mean, lo, hi = _geometric_interval([1.0, 1.21, 1.1])
    assert mean == pytest.approx(math.exp((math.log(1.21) + math.log(1.1)) / 3))
    assert 1.0 <= lo < mean < hi <= 1.21


def test_equal_rounds_give_a_point_interval() -> None:
    assert _geometric_interval([1.04] * 5) == pytest.approx((1.04, 1.04, 1.04))


def test_the_interval_is_the_same_for_the_same_seed() -> None:
    ratios = [0.93, 1.07, 1.02, 0.98, 1.11, 1.0]
    assert _geometric_interval(ratios) == _geometric_interval(ratios)
    assert _geometric_interval(ratios, seed=1) != _geometric_interval(ratios)

"""When ``ragline tune`` applies its winner: only a held-out gain whose interval lies above 0,
or an operator's ``--apply``; never a setting that ranks as the current one."""

from __future__ import annotations

import pytest

from evaluation import cv
from evaluation.tuning import TuneReport, _decide
from retrieve.service import FusionConfig

CURRENT = FusionConfig(rrf_k=60, dense_weight=1.0, lexical_weight=1.0, candidates=50)
OTHER = FusionConfig(rrf_k=10, dense_weight=1.0, lexical_weight=0.5, candidates=100)
# The current setting with an explicit depth equal to what top_k floors it to: ranks the same.
SAME = FusionConfig(rrf_k=60, dense_weight=1.0, lexical_weight=1.0, candidates=50, dense_candidates=100)


def _report() -> TuneReport:
    return TuneReport(
        "t", ["x"], 10, 3, 100, [], {}, {}, {}, 0, 0.5, 0.5, 0.0, (0.0, 0.0), 0.5, 0.5, 0.0, (0.0, 0.0)
    )


def _result(final: int, interval: tuple[float, float]) -> cv.CrossValidation:
    return cv.CrossValidation([], [], [], final, interval, (0.0, 0.0))


@pytest.mark.parametrize(
    ("interval", "force", "applied", "forced"),
    [
        ((0.01, 0.05), False, True, False),  # lower bound above 0: applied
        ((0.0, 0.05), False, False, False),  # touching 0 is not above it
        ((-0.02, 0.05), False, False, False),
        ((-0.05, -0.01), False, False, False),  # worse on held-out folds
        ((-0.02, 0.05), True, True, True),  # --apply forces it, and says so
        ((0.01, 0.05), True, True, False),  # not forced when it would apply anyway
    ],
)
def test_applies_only_above_zero_or_forced(
    interval: tuple[float, float], force: bool, applied: bool, forced: bool
) -> None:
    report = _report()
    _decide(report, _result(1, interval), [CURRENT, OTHER], force=force, top_k=100)
    assert (report.applied, report.forced) == (applied, forced), report.reason
    if not applied:
        assert "not applied" in report.reason and "--apply" in report.reason


@pytest.mark.parametrize("force", [False, True])
def test_a_winner_that_ranks_as_the_current_setting_is_never_applied(force: bool) -> None:
    for configs in ([CURRENT, OTHER], [CURRENT, SAME]):
        final = 0 if configs[1] is OTHER else 1
        report = _report()
        _decide(report, _result(final, (0.1, 0.2)), configs, force=force, top_k=100)
        assert not report.applied and "nothing to apply" in report.reason

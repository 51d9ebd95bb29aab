"""Cron arithmetic of schedules (croniter): next windows, invalid expressions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.errors import InvalidInputError
from services.schedules import next_after, validate_cron


def test_next_window_is_strictly_after() -> None:
    sunday_3am = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    assert next_after("0 3 * * 0", sunday_3am) == datetime(2026, 12, 6, 3, 0, tzinfo=UTC)
    assert next_after("0 3 * * 0", datetime(2026, 12, 1, 7, 36, tzinfo=UTC)) == datetime(
        2026, 12, 6, 3, 0, tzinfo=UTC
    )
    assert next_after("*/15 * * * *", datetime(2026, 12, 1, 7, 36, tzinfo=UTC)) == datetime(
        2026, 12, 1, 7, 45, tzinfo=UTC
    )


@pytest.mark.parametrize("bad", ["", "every sunday", "61 * * * *", "* * *"])
def test_invalid_cron_is_refused(bad: str) -> None:
    with pytest.raises(InvalidInputError, match="not a cron expression"):
        validate_cron(bad)


def test_job_arguments_are_typed_and_checked() -> None:
    from services.schedules import validate_args

    assert validate_args("rebuild", {"shards": "4"}) == {"shards": 4}
    assert validate_args("reembed", {"model": "/m", "force": "true", "gate_tolerance": "0.02"}) == {
        "model": "/m",
        "force": True,
        "gate_tolerance": 0.02,
    }
    with pytest.raises(InvalidInputError, match="unknown"):
        validate_args("rebuild", {"shard": "4"})
    with pytest.raises(InvalidInputError, match="needs \\['model'\\]"):
        validate_args("reembed", {"shards": "2"})
    with pytest.raises(InvalidInputError, match="not valid"):
        validate_args("reembed", {"model": "/m", "force": "maybe"})
    with pytest.raises(InvalidInputError, match="job must be one of"):
        validate_args("vacuum", {})

"""Which failures pause an ingestion job (the database went away) rather than fail it."""

from __future__ import annotations

import psycopg
from psycopg_pool import PoolTimeout

from jobs.runner import database_down


def test_database_errors_pause_a_job_others_fail_it() -> None:
    assert database_down(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert database_down(PoolTimeout("couldn't get a connection after 5.00 sec"))
    assert not database_down(ValueError("bad input"))
    assert not database_down(psycopg.errors.UniqueViolation("duplicate key"))


def test_a_database_error_wrapped_by_another_still_pauses() -> None:
    try:
        try:
            raise psycopg.errors.AdminShutdown("terminating connection due to administrator command")
        except psycopg.Error as inner:
            raise RuntimeError("ray task failed") from inner
    except RuntimeError as outer:
        assert database_down(outer)

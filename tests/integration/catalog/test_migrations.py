from __future__ import annotations

import threading

import psycopg
import pytest

from catalog.db import applied_migrations, apply_migrations, load_migrations

pytestmark = pytest.mark.integration


def test_apply_twice_is_a_no_op(db_url: str) -> None:
    assert apply_migrations(db_url) == []
    with psycopg.connect(db_url) as conn:
        assert applied_migrations(conn) == [m.number for m in load_migrations()]


@pytest.mark.parametrize("round_", range(3))
def test_concurrent_apply_on_a_fresh_database(pg_url: str, round_: int) -> None:
    """Several processes starting at once: exactly one applies each migration, none fails.

    A barrier releases the threads together: before the fix, concurrent
    ``CREATE TABLE IF NOT EXISTS schema_migrations`` failed on pg_type's unique index.
    """
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS ragline_concurrent")
        admin.execute("CREATE DATABASE ragline_concurrent")
    url = pg_url.replace("/ragline?", "/ragline_concurrent?")
    results: list[list[int]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def run() -> None:
        try:
            barrier.wait()
            results.append(apply_migrations(url))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    applied = sorted(n for r in results for n in r)
    assert applied == [m.number for m in load_migrations()]
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("DROP DATABASE ragline_concurrent WITH (FORCE)")


def test_audit_log_is_append_only(conn: psycopg.Connection) -> None:
    conn.execute("INSERT INTO audit_log (actor, action) VALUES ('t', 'x')")
    with pytest.raises(psycopg.errors.RaiseException):
        conn.execute("UPDATE audit_log SET action = 'y'")
    with pytest.raises(psycopg.errors.RaiseException):
        conn.execute("DELETE FROM audit_log")

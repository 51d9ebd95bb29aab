"""The audit log: batch writer, append-only except the retention GC, GC in the maintenance
tick, and migrations recorded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from catalog import audit
from catalog.audit import AuditEvent
from catalog.db import apply_migrations, load_migrations, open_pool
from jobs.audit_writer import AuditWriter, AuditWriterConfig
from services.maintenance import tick
from tests import factories

pytestmark = pytest.mark.integration


def _retrieve(target: str | None = None, at: datetime | None = None) -> AuditEvent:
    """A retrieve entry of the registered shape (its details' values do not matter here)."""
    details = dict.fromkeys(audit.ACTIONS["retrieve"].details)
    return AuditEvent(actor="user:a", action="retrieve", target=target, details=details, at=at)


def _count(conn: psycopg.Connection, action: str) -> int:
    row = conn.execute("SELECT count(*) FROM audit_log WHERE action = %s", (action,)).fetchone()
    return int(row[0]) if row else 0


def test_writer_batches_flushes_and_drops_when_full(db_url: str, conn: psycopg.Connection) -> None:
    pool = open_pool(db_url, size=2)
    batches: list[int] = []
    try:
        writer = AuditWriter(
            pool, AuditWriterConfig(batch_size=3, flush_s=0.05, queue_size=100), on_written=batches.append
        )
        writer.start()
        for i in range(7):
            assert writer.submit(_retrieve(f"r{i}"))
        assert writer.flush(5.0)
        assert _count(conn, "retrieve") == 7 and writer.written == 7 and sum(batches) == 7
        assert max(batches) <= 3  # never more than batch_size per COPY
        writer.close()

        # Not started: nothing drains the queue, so the second event finds it full.
        stalled = AuditWriter(pool, AuditWriterConfig(batch_size=10, flush_s=0.05, queue_size=1))
        assert stalled.submit(_retrieve())
        assert not stalled.submit(_retrieve())
        assert stalled.dropped == 1
        # an event without its action's shape is refused at submit, alone
        assert not writer.submit(AuditEvent(actor="user:a", action="retrieve", details={"query": "q"}))
        assert writer.dropped == 1
    finally:
        pool.close()


def test_append_only_except_retention_gc_which_runs_in_the_maintenance_tick(
    db_url: str, conn: psycopg.Connection, tmp_path: Path
) -> None:
    old = datetime.now(UTC) - timedelta(days=10)
    audit.record_many(
        conn,
        events=[
            _retrieve("old", at=old),
            _retrieve("new"),
        ],
    )
    with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
        conn.execute("DELETE FROM audit_log WHERE target = 'new'")
    with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
        conn.execute("UPDATE audit_log SET actor = 'someone' WHERE target = 'old'")
    assert audit.collect_garbage(conn, retention_seconds=30 * 86400) == 0
    result = tick(
        db_url,
        factories.rebuild(index_root=tmp_path / "indexes"),
        factories.policy(audit_retention_seconds=86400.0),
    )
    assert result.ran and result.audit_removed == 1
    assert [r.target for r in audit.entries(conn, action="retrieve")] == ["new"]
    with pytest.raises(psycopg.errors.RaiseException):  # the GC's flag did not outlive its call
        conn.execute("DELETE FROM audit_log")


def test_migrations_are_audited_once(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS ragline_audited")
        admin.execute("CREATE DATABASE ragline_audited")
    url = pg_url.replace("/ragline?", "/ragline_audited?")
    try:
        apply_migrations(url)
        apply_migrations(url)
        with psycopg.connect(url) as conn:
            rows = audit.entries(conn, action="schema.migrate")
        assert sorted(r.target or "" for r in rows) == [f"{m.number:03d}_{m.name}" for m in load_migrations()]
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("DROP DATABASE ragline_audited WITH (FORCE)")


def test_an_erasure_removes_only_the_query_text_of_the_searches_that_returned_it(
    conn: psycopg.Connection,
) -> None:
    def search(target: str, tenant: str, chunk_ids: list[str]) -> AuditEvent:
        details = {**dict.fromkeys(audit.ACTIONS["retrieve"].details), "chunk_ids": chunk_ids, "query": "q"}
        return AuditEvent(actor="user:a", action="retrieve", tenant_id=tenant, target=target, details=details)

    audit.record_many(
        conn,
        events=[
            search("hit", "acme", ["c1", "c2"]),
            search("miss", "acme", ["c3"]),
            search("other", "b", ["c1"]),
        ],
    )
    assert audit.erase_queries(conn, tenant_id="acme", chunk_ids=["c1"]) == ["hit"]
    rows: dict[str, dict] = dict(conn.execute("SELECT target, details FROM audit_log").fetchall())
    assert "query" not in rows["hit"] and rows["hit"]["chunk_ids"] == ["c1", "c2"]
    assert rows["miss"]["query"] == "q" and rows["other"]["query"] == "q"  # another search, tenant
    # The trigger lets that one change through and nothing else, even with its flag set.
    with pytest.raises(psycopg.errors.RaiseException, match="append-only"), conn.transaction():
        conn.execute("SELECT set_config('ragline.audit_erase', 'on', true)")
        conn.execute("UPDATE audit_log SET actor = 'someone', details = details - 'query'")
    with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
        conn.execute("UPDATE audit_log SET details = details - 'query' WHERE target = 'miss'")

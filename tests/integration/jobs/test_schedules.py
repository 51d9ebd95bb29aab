"""Stored schedules: a due window runs once across processes, a missed window is caught up
once, and ``ragline jobs run-due`` runs a real rebuild."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from catalog import indexes
from catalog.bulk import BulkChunk, BulkDocument, bulk_load
from catalog.schedules import list_schedules
from core.settings import DEFAULT_EMBEDDING_MODEL
from services import schedules
from services.caller import Caller

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]


def _record(calls: list[Any], value: Any, result: str) -> str:
    """A runner stand-in: note the call, answer ``result``."""
    calls.append(value)
    return result


def _backdate(conn: psycopg.Connection, schedule_id: int, by: timedelta) -> None:
    conn.execute("UPDATE schedules SET next_run_at = now() - %s WHERE schedule_id = %s", (by, schedule_id))


def test_a_missed_window_is_caught_up_once(conn: psycopg.Connection) -> None:
    now = datetime.now(UTC)
    row = schedules.add(
        conn, job="rebuild", cron="*/5 * * * *", args={}, caller=Caller("test", "cli"), now=now
    )
    assert row.next_run_at > now
    assert schedules.run_due(conn, now=now, runners={"rebuild": lambda a: "ok"}) == []
    _backdate(conn, row.schedule_id, timedelta(hours=3))  # 36 windows missed
    calls: list[Mapping[str, Any]] = []
    ran = schedules.run_due(
        conn, now=datetime.now(UTC), runners={"rebuild": lambda a: _record(calls, a, "ok")}
    )
    assert [r.schedule_id for r in ran] == [row.schedule_id] and len(calls) == 1
    (after,) = list_schedules(conn)
    assert after.next_run_at > datetime.now(UTC) and after.last_result == "ok"
    assert schedules.run_due(conn, now=datetime.now(UTC), runners={"rebuild": lambda a: "again"}) == []


def test_a_failing_job_is_recorded_and_retried_next_window(conn: psycopg.Connection) -> None:
    row = schedules.add(
        conn,
        job="reembed",
        cron="0 * * * *",
        args={"model": "m"},
        caller=Caller("t", "cli"),
        now=datetime.now(UTC),
    )
    _backdate(conn, row.schedule_id, timedelta(minutes=1))
    (ran,) = schedules.run_due(conn, now=datetime.now(UTC), runners={})
    assert ran.result.startswith("failed: InvalidInputError") and "cannot run reembed" in ran.result
    assert list_schedules(conn)[0].last_result == ran.result


def _race(db_url: str, threads: int) -> int:
    """``threads`` runners start ``run_due`` together; returns how many jobs ran in total."""
    calls: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def count(args: Mapping[str, Any]) -> str:
        with lock:
            calls.append(1)
        return "ok"

    def worker() -> None:
        with psycopg.connect(db_url, autocommit=True) as conn:
            barrier.wait()
            schedules.run_due(conn, now=datetime.now(UTC), runners={"rebuild": count})

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return len(calls)


def test_concurrent_runners_run_a_window_once(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        now = datetime.now(UTC)
        ids = [
            schedules.add(
                conn, job="rebuild", cron="* * * * *", args={}, caller=Caller("t", "cli"), now=now
            ).schedule_id
            for _ in range(5)
        ]
    for _round in range(3):
        with psycopg.connect(db_url, autocommit=True) as conn:
            for sid in ids:
                _backdate(conn, sid, timedelta(minutes=2))
        assert _race(db_url, threads=4) == len(ids)  # each due schedule exactly once


def _seed(conn: psycopg.Connection) -> None:
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(6, 384)).astype("<f4")
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    docs = [BulkDocument(d, f"d{d}", f"D{d}", f"h{d}", 2, public=True) for d in (1, 2, 3)]
    chunks = [
        BulkChunk(i + 1, f"c{i}", i // 2 + 1, i % 2, f"text {i}", 0, 2, vecs[i].tobytes()) for i in range(6)
    ]
    bulk_load(conn, tenant_id="t", documents=docs, chunks=chunks, model=DEFAULT_EMBEDDING_MODEL, dim=384)


def test_two_run_due_processes_rebuild_once(db_url: str, tmp_path: Path) -> None:
    with psycopg.connect(db_url) as conn:
        _seed(conn)
    with psycopg.connect(db_url, autocommit=True) as conn:
        row = schedules.add(
            conn,
            job="rebuild",
            cron="0 3 * * 0",
            args={"shards": "1"},
            caller=Caller("t", "cli"),
            now=datetime.now(UTC),
        )
        _backdate(conn, row.schedule_id, timedelta(days=30))  # four Sundays missed
    env = {
        **os.environ,
        "RAGLINE_DATABASE_URL": db_url,
        "RAGLINE_DATA_DIR": str(tmp_path),
        "PYTHONPATH": str(REPO),
    }
    cmd = [sys.executable, "-m", "cli.main", "jobs", "run-due", "--json"]
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    runs = [r for out, _ in outs for r in json.loads(out)]
    assert len(runs) == 1 and runs[0]["result"].startswith("built v")
    with psycopg.connect(db_url) as conn:
        versions = indexes.list_versions(conn)
        assert len(versions) == 1 and versions[0].n_shards == 1 and versions[0].chunk_count == 6
        assert indexes.aliases(conn)["live"] == versions[0].version_id
        (after,) = list_schedules(conn)
        assert after.next_run_at > datetime.now(UTC) and (after.last_result or "").startswith("built")


def test_the_maintenance_tick_runs_due_schedules(db_url: str, tmp_path: Path) -> None:
    from services.maintenance import tick
    from tests import factories

    with psycopg.connect(db_url, autocommit=True) as conn:
        row = schedules.add(
            conn, job="rebuild", cron="0 0 1 * *", args={}, caller=Caller("t", "cli"), now=datetime.now(UTC)
        )
        _backdate(conn, row.schedule_id, timedelta(days=1))
    runs: list[int] = []
    result = tick(
        db_url,
        factories.rebuild(tmp_path / "idx"),
        factories.policy(gc_grace_seconds=3600),
        {"rebuild": lambda args: _record(runs, 1, "ran")},
    )
    assert result.ran and [r.result for r in result.scheduled] == ["ran"] and runs == [1]
    again = tick(db_url, factories.rebuild(tmp_path / "idx"), factories.policy(), {"rebuild": lambda a: "x"})
    assert again.scheduled == ()

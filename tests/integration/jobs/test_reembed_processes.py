"""Model migrations as real processes: a due ``reembed`` schedule run by ``ragline jobs run-due``
starts the detached migration process, which swaps to the target; and a ``ragline reembed
--wait`` on the Ray path killed with SIGKILL mid-backfill resumes embedding only what is missing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from catalog import indexes
from catalog import jobs as jobs_repo
from catalog import reembed as reembed_repo
from catalog.maintenance import all_live_leaf_count
from catalog.schedules import list_schedules
from core.settings import Settings
from jobs.reembed_job import run_reembed
from services import schedules
from services.caller import Caller
from tests.integration.jobs import reembed_helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]


def _env(db_url: str, data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGLINE_")}
    return {
        **env,
        "PYTHONPATH": str(REPO),
        "RAGLINE_DATABASE_URL": db_url,
        "RAGLINE_DATA_DIR": str(data_dir),
        **extra,
    }


def _owner_pid(conn: psycopg.Connection, job_id: uuid.UUID) -> int | None:
    """The pid of the process that claimed the job (``run_reembed``'s owner: ``reembed:PID:...``)."""
    row = conn.execute("SELECT owner FROM jobs WHERE job_id = %s", (job_id,)).fetchone()
    if not row or not row[0] or not row[0].startswith("reembed:"):
        return None
    return int(row[0].split(":")[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_due_reembed_schedule_runs_the_detached_migration_to_the_swap(
    db_url: str, tmp_path: Path, embedder, model_variants_dir: dict[str, Path]
) -> None:
    h.ingest(db_url, tmp_path, embedder, "acme", h.topic_docs())
    first = h.build_live(db_url, tmp_path / "indexes")
    model = str(model_variants_dir["cls"])
    with psycopg.connect(db_url, autocommit=True) as conn:
        row = schedules.add(
            conn,
            job="reembed",
            cron="0 4 * * 6",
            args={"model": model, "index_kind": "flat"},
            caller=Caller("test", "cli"),
            now=datetime.now(UTC),
        )
        conn.execute(
            "UPDATE schedules SET next_run_at = now() - interval '1 minute' WHERE schedule_id = %s",
            (row.schedule_id,),
        )
    # The inline path (reembed.use_ray false) keeps the detached process small and quick.
    env = _env(db_url, tmp_path, RAGLINE_REEMBED__USE_RAY="false", RAGLINE_REEMBED__BATCH_CHUNKS="4")
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "jobs", "run-due", "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (ran,) = json.loads(done.stdout)
    assert ran["job"] == "reembed" and ran["result"].startswith("started reembed job"), ran
    job_id = uuid.UUID(ran["result"].split()[3])
    pid = None
    try:
        deadline = time.monotonic() + 300
        with psycopg.connect(db_url, autocommit=True) as conn:
            while time.monotonic() < deadline:
                pid = pid or _owner_pid(conn, job_id)
                job = jobs_repo.get_job(conn, job_id=job_id)
                assert job is not None
                if job.state not in ("queued", "running"):
                    break
                time.sleep(0.5)
        assert job is not None
        assert job.state == "succeeded", (job.state, job.error)
        assert pid is not None  # the detached process claimed it
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:  # it exits on its own after the swap
            time.sleep(0.1)
        assert not _alive(pid)
    finally:  # never leave the detached migration running
        if pid is not None and _alive(pid):
            os.killpg(pid, signal.SIGKILL)
    report = job.params["report"]
    assert report["gate"]["passed"] and report["swapped"]["from"] == first
    with psycopg.connect(db_url) as conn:
        live = indexes.resolve_alias(conn, alias="live")
        assert live is not None and live.version_id == report["swapped"]["to"]
        assert live.embedding_model == model and live.chunk_count == all_live_leaf_count(conn)
        assert reembed_repo.active_migration(conn) is None
        (after,) = list_schedules(conn)
        assert after.last_result == ran["result"] and after.next_run_at > datetime.now(UTC)
    log = (tmp_path / "logs" / f"reembed-{job_id}.log").read_text()
    assert "succeeded" in log


def test_kill_9_on_the_ray_path_then_resume_embeds_only_what_is_missing(
    db_url: str, tmp_path: Path, embedder, model_variants_dir: dict[str, Path], ray_local: None
) -> None:
    import ray

    h.ingest(db_url, tmp_path, embedder, "acme", h.backfill_docs())
    h.build_live(db_url, tmp_path / "indexes")
    model = str(model_variants_dir["cls"])
    # The CLI joins this session's Ray as a second driver; its actors die with it.
    env = _env(
        db_url,
        tmp_path,
        RAGLINE_RAY_ADDRESS=ray.get_runtime_context().gcs_address,
        RAGLINE_REEMBED__BATCH_CHUNKS="2",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "reembed", "--model", model, "--wait"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        killed = h.kill_mid_backfill(db_url, proc, model, timeout_s=240, group=True)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    settings = Settings(data_dir=tmp_path, database_url=db_url, reembed={"batch_chunks": 8})
    config = h.migration_config(settings, db_url, Path(model), use_ray=True)
    assert run_reembed(db_url, killed.job_id, config, force_claim=True) == "succeeded"
    with psycopg.connect(db_url) as conn:
        job = jobs_repo.get_job(conn, job_id=killed.job_id)
    assert job is not None and job.chunks >= killed.total - killed.committed
    h.assert_resumed(db_url, model, killed, job.params["report"])

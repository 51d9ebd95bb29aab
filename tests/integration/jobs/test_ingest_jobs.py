from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, LiteralString

import psycopg
import pytest

from catalog import jobs as jobs_repo
from catalog.jobs import NewItem
from catalog.principals import ensure_tenant
from core.records import Acl
from jobs.runner import IngestRunner, RunnerConfig
from tests import factories

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
WORDS = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()
)


def _text(i: int, paragraphs: int = 6) -> str:
    return "\n\n".join(
        " ".join(WORDS[(i * 7 + p * 3 + w) % len(WORDS)] for w in range(60)) + "." for p in range(paragraphs)
    )


def _one(conn: psycopg.Connection, sql: LiteralString, params: tuple[object, ...] = ()) -> tuple[Any, ...]:
    row = conn.execute(sql, params).fetchone()
    assert row is not None, sql
    return tuple(row)


def _ray_config(db_url: str, tmp_path: Path) -> RunnerConfig:
    """Every job through Ray Data (no inline path), two embedding actors, batches of four."""
    return factories.runner(
        conninfo=db_url,
        model_name="bundled:all-MiniLM-L6-v2",
        data_dir=tmp_path,
        inline_max_documents=0,
        use_ray=True,
        embed_actors=2,
        batch_documents=4,
        embedding=factories.embedding(backend="torch"),  # no ONNX export in the test
    )


def _assert_exactly_once(conn: psycopg.Connection, tenant: str, n_docs: int) -> None:
    docs = conn.execute(
        "SELECT count(*), count(*) FILTER (WHERE current_version = 1) FROM documents WHERE tenant_id = %s",
        (tenant,),
    ).fetchone()
    assert docs == (n_docs, n_docs)
    versions, expected = _one(
        conn,
        "SELECT count(*), coalesce(sum(chunk_count), 0) FROM document_versions v"
        " JOIN documents d USING (doc_id)"
        " WHERE d.tenant_id = %s",
        (tenant,),
    )
    assert versions == n_docs
    chunks, leaves, embeddings = _one(
        conn,
        "SELECT count(*), count(*) FILTER (WHERE level = 0), count(e.chunk_row) FROM chunks c"
        " JOIN documents d USING (doc_id) LEFT JOIN chunk_embeddings e ON e.chunk_row = c.chunk_row"
        " WHERE d.tenant_id = %s",
        (tenant,),
    )
    assert chunks == expected and embeddings == leaves > 0


def test_ray_pipeline_ingests_every_document_once(db_url: str, tmp_path: Path, ray_local: None) -> None:
    n = 12
    with psycopg.connect(db_url) as conn:
        ensure_tenant(conn, tenant_id="raytenant")
        items = [
            NewItem(external_id=f"r{i}", mime_type="text/plain", payload=_text(i).encode(), acl=Acl((), True))
            for i in range(n)
        ]
        items.append(NewItem(external_id="broken", mime_type="application/pdf", payload=b"%PDF-1.4 garbage"))
        job_id = jobs_repo.create_job(conn, tenant_id="raytenant", kind="ingest", items=items)
    config = _ray_config(db_url, tmp_path)
    runner = IngestRunner(config, lambda: pytest.fail("the Ray path must not load an in-process embedder"))
    assert runner.run_job(job_id) == "partially_failed"
    with psycopg.connect(db_url) as conn:
        job = jobs_repo.get_job(conn, job_id=job_id)
        assert job is not None and job.documents_done == n + 1 and job.documents_failed == 1
        [failed] = jobs_repo.items(conn, job_id=job_id, state="failed")
        assert failed.external_id == "broken" and failed.error_code == "corrupt_pdf"
        _assert_exactly_once(conn, "raytenant", n)


def test_killed_ingest_resumes_exactly_once(db_url: str, tmp_path: Path) -> None:
    n = 40
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(n):
        (corpus / f"doc{i:02d}.txt").write_text(_text(i, paragraphs=10))
    env = {
        **os.environ,
        "RAGLINE_DATABASE_URL": db_url,
        "RAGLINE_DATA_DIR": str(tmp_path / "data"),
        "RAGLINE_INGEST__EMBED_BATCH_SIZE": "8",
        "HF_HUB_OFFLINE": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "cli.main",
        "ingest",
        str(corpus),
        "--tenant",
        "killme",
        "--public",
        "--no-ray",
    ]
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    done = 0
    with psycopg.connect(db_url, autocommit=True) as conn:
        while time.monotonic() < deadline and proc.poll() is None:
            row = conn.execute("SELECT count(*) FROM job_items WHERE state = 'succeeded'").fetchone()
            done = row[0] if row else 0
            if done >= 8:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert 0 < done < n, f"kill landed at {done}/{n}: tune the corpus size"
        (job_id,) = _one(conn, "SELECT job_id FROM jobs WHERE tenant_id = 'killme'")
        assert _one(conn, "SELECT state FROM jobs WHERE job_id = %s", (job_id,)) == ("running",)
    out = subprocess.run(
        [sys.executable, "-m", "cli.main", "jobs", "resume", str(job_id)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("succeeded")
    with psycopg.connect(db_url) as conn:
        _assert_exactly_once(conn, "killme", n)


def test_ray_pipeline_commits_progress_per_batch(db_url: str, tmp_path: Path, ray_local: None) -> None:
    """What ``GET /v1/jobs`` (and the console) show while a Ray job runs: each batch that comes
    back is committed at once, so the catalog's counts move before the job ends."""
    n = 12
    with psycopg.connect(db_url) as conn:
        ensure_tenant(conn, tenant_id="raytenant")
        items = [
            NewItem(external_id=f"p{i}", mime_type="text/plain", payload=_text(i).encode(), acl=Acl((), True))
            for i in range(n)
        ]
        job_id = jobs_repo.create_job(conn, tenant_id="raytenant", kind="ingest", items=items)
    config = _ray_config(db_url, tmp_path)
    seen: list[int] = []

    def on_progress(_documents: int, _chunks: int) -> None:
        with psycopg.connect(db_url) as conn:
            job = jobs_repo.get_job(conn, job_id=job_id)
        assert job is not None and job.state == "running"
        seen.append(job.documents_done)

    runner = IngestRunner(config, lambda: pytest.fail("the Ray path must not load an in-process embedder"))
    assert runner.run_job(job_id, on_progress=on_progress) == "succeeded"
    assert len(seen) >= 2 and seen == sorted(seen) and any(0 < done < n for done in seen), seen

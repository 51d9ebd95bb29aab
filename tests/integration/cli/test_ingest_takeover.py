"""Issue 44: when another worker takes a ``ragline ingest`` job over, the command follows it
to its end, prints its final state and exits with that state's code (never ``None``, 1).

Fault injection: the command's runner embeds with a hooked model whose first encode call has
a second runner take the job over (as ``ragline jobs resume`` does) and finish it a moment
later, so the command loses the job mid-batch and must wait for the other worker.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

import wiring
from catalog import jobs as jobs_repo
from cli.main import main
from index.embedder import Embedder
from jobs.runner import IngestRunner
from testkit.embedders import HookedEmbedder
from tests import factories

pytestmark = pytest.mark.integration


def _the_job(url: str) -> uuid.UUID:
    with psycopg.connect(url) as conn:
        [job] = jobs_repo.list_jobs(conn, tenant_id=None)
    return job.job_id


def test_a_job_taken_over_is_followed_to_its_end_and_its_exit_code(
    cli_env: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    embedder: Embedder,
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "good.md").write_text("# Good\n\nfine text about pallets")
    (docs / "empty.txt").write_text("   \n")  # fails: the job ends partially_failed (exit 3)
    config = factories.runner(cli_env, tmp_path / "rival", use_ray=False)
    claimed, finished = threading.Event(), threading.Event()

    def rival_model() -> Embedder:
        claimed.set()  # the rival holds the job now; it finishes after the command noticed
        time.sleep(1.5)
        return embedder

    rival = IngestRunner(replace(config, isolation=replace(config.isolation, enabled=False)), rival_model)
    rival_state: list[str | None] = []

    def take_over(texts: Sequence[str]) -> None:
        if claimed.is_set():
            return
        job_id = _the_job(cli_env)

        def run() -> None:
            rival_state.append(rival.run_job(job_id, force=True))
            finished.set()

        threading.Thread(target=run, daemon=True).start()
        assert claimed.wait(timeout=30)

    real_make_runner = wiring.make_runner

    def hooked_runner(*args: Any, **kwargs: Any) -> IngestRunner:
        return real_make_runner(*args, **kwargs, embedder=HookedEmbedder(embedder, before=take_over))

    monkeypatch.setattr(wiring, "make_runner", hooked_runner)
    monkeypatch.setenv("RAGLINE_INGEST__ISOLATE_PARSING", "false")  # seconds of worker start-up, no lease
    code = main(["ingest", str(docs), "--tenant", "acme", "--no-ray", "--public"])
    out = capsys.readouterr().out
    assert finished.wait(timeout=30) and rival_state == ["partially_failed"]
    job_id = _the_job(cli_env)
    assert f"{job_id}\tpartially_failed" in out.splitlines() and "None" not in out
    assert code == 3
    assert f"runs on another worker ({rival.owner}); following it to its end" in caplog.text
    with psycopg.connect(cli_env) as conn:
        assert jobs_repo.lease_owner(conn, job_id=job_id) == rival.owner  # the rival did finish it

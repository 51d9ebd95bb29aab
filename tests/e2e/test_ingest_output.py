"""A successful ``ragline ingest`` prints its job and progress, and nothing that looks like a
problem: no traceback, no error line.

Before issue 23 an ingest through Ray printed Ray's C++ ``E ... core_worker.cc`` notice about
Ray Data's own actor arguments (dropped for ``serve``/``run`` only), and a parse worker still
starting when the job ended could print a ``BrokenPipeError`` traceback.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.server import REPO, server_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SAMPLES = REPO / "samples" / "corpus"
PROBLEM = re.compile(r"Traceback|Error|error|\bE \d+ \d+\]|core_worker|Exception|CRITICAL")


def _ingest(
    db_url: str, data_dir: Path, tenant: str, *extra: str, models: Path | None = None, **env: str
) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "cli.main", "ingest", str(SAMPLES), "--tenant", tenant, "--public", *extra],
        env=server_env(db_url, data_dir, models=models, RAY_USAGE_STATS_ENABLED="0", **env),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=900,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-4000:]
    assert "\tsucceeded" in out.stdout, out.stdout[-4000:]
    return out.stdout


def _problems(output: str) -> list[str]:
    return [line for line in output.splitlines() if PROBLEM.search(line)]


def test_an_ingest_through_ray_prints_no_error_line(db_url: str, tmp_path: Path) -> None:
    # inline_max_documents 0: every job goes through Ray Data's actor pools. A fresh data dir:
    # the embedding model's ONNX export happens in the actors, and prints nothing either.
    output = _ingest(db_url, tmp_path / "data", "quiet-ray", RAGLINE_INGEST__INLINE_MAX_DOCUMENTS="0")
    assert "documents" in output and "docs" in output  # the job line and the progress lines
    assert not _problems(output), "noise:\n" + "\n".join(_problems(output))


def test_an_in_process_ingest_prints_no_error_line(
    db_url: str, tmp_path: Path, embedding_export: Path
) -> None:
    # The session's export is reused here; the Ray test above exports on its fresh data dir.
    output = _ingest(db_url, tmp_path / "data", "quiet-inline", "--no-ray", models=embedding_export)
    assert not _problems(output), "noise:\n" + "\n".join(_problems(output))

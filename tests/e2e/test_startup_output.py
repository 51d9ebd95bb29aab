"""A successful start prints what an operator needs and nothing that looks like a problem.

``ragline run`` (``make run``) is the noisiest start there is: it starts a local Ray, ingests
the sample corpus through Ray Data actor pools, loads the embedding model (exporting it to
ONNX on a fresh data directory), builds an index version and serves it. Before issue 17 its
output held a Ray ``E ... core_worker.cc`` line, Ray's token-auth notice, Ray Data's
"Progress bars disabled" warning, a tqdm "Loading weights" bar and onnxruntime's
per-fusion INFO lines; none of them reported a problem.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testkit.ports import free_port
from testkit.server import REPO, server_env, wait_ready

pytestmark = [pytest.mark.integration, pytest.mark.slow]

START_TIMEOUT_S = 600.0  # ingestion through Ray and an index build come before the server
NOISE = (
    "core_worker",  # Ray's C++ notice about Ray Data's own actor arguments
    "Token authentication is enabled",
    "Progress bars disabled",
    "Loading weights",
    "fusion_base",
    "it/s]",  # any tqdm bar
)


def test_make_run_starts_quietly(db_url: str, tmp_path: Path) -> None:
    port = free_port()
    data_dir = tmp_path / "data"  # fresh: the embedding model is exported to ONNX on this start
    data_dir.mkdir()
    env = server_env(
        db_url,
        data_dir,
        RAGLINE_API__HOST="127.0.0.1",
        RAGLINE_API__PORT=str(port),
        RAGLINE_LOG_LEVEL="INFO",  # the default: what an operator sees
        RAY_USAGE_STATS_ENABLED="0",
    )
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)  # the CLI must quiet the bars by itself
    log_path = tmp_path / "run.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "run"],
            env=env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: Ray's processes and the stderr filter end with it
        )
    try:
        wait_ready(f"http://127.0.0.1:{port}", proc, log_path, timeout_s=START_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    time.sleep(1.0)  # the stderr filter flushes what was left in its pipe
    output = log_path.read_text(errors="replace")
    assert "sample corpus: job" in output and "succeeded" in output  # Ray did run
    assert "is live" in output and "ragline is serving on" in output
    assert '"msg": "ragline API ready"' in output
    found = [line for line in output.splitlines() if any(n in line for n in NOISE)]
    assert not found, "start-up noise:\n" + "\n".join(found)

"""Under ``--workers > 1`` each worker writes its samples to PROMETHEUS_MULTIPROC_DIR and
``/metrics`` merges them (prometheus-client's multiprocess mode)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

WORKER = (
    "from core import metrics\n"
    "metrics.ERRORS.labels('rate_limited').inc()\n"
    "metrics.HTTP_LATENCY.labels('/v1/retrieve', 'POST', '2xx').observe(0.02)\n"
)
SCRAPE = "from api.metrics import _exposition\nprint(_exposition().decode())\n"


def test_workers_samples_are_merged(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    root = Path(__file__).resolve().parents[3]
    for _ in range(2):  # two "workers", each its own process
        subprocess.run([sys.executable, "-c", WORKER], env=env, cwd=root, check=True)
    out = subprocess.run(
        [sys.executable, "-c", SCRAPE], env=env, cwd=root, check=True, capture_output=True, text=True
    ).stdout
    assert 'ragline_errors_total{code="rate_limited"} 2.0' in out
    labels = 'method="POST",route="/v1/retrieve",status_class="2xx"'
    assert f"ragline_http_request_duration_seconds_count{{{labels}}} 2.0" in out

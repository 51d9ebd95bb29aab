"""The unit tier passes whatever ``RAGLINE_*`` variables the user exported (tests/unit/conftest.py):
a user who runs several deployments has RAGLINE_DATA_DIR and friends set in their shell."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

# Odd but valid values, each of which a test of the defaults would see.
EXPORTED = {
    "RAGLINE_DATA_DIR": "/srv/ragline-staging",
    "RAGLINE_DATABASE_URL": "postgresql://someone@db.invalid:5433/other",
    "RAGLINE_API__PORT": "9123",
    "RAGLINE_INGEST__CHUNK_TOKENS": "100",
    "RAGLINE_INGEST__CHUNK_OVERLAP": "10",
    "RAGLINE_API__MAX_BATCH_DOCUMENTS": "7",
    "RAGLINE_API_URL": "http://elsewhere.invalid:8000",
}


def test_settings_tests_pass_with_ragline_variables_exported() -> None:
    env = {**os.environ, **EXPORTED}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/unit/core/test_settings.py", "-q", "-p", "no:cacheprovider"]
        + ["--durations-file="],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert " passed" in out.stdout and "failed" not in out.stdout

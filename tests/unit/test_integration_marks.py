"""The collection hook in tests/conftest.py refuses a test that starts PostgreSQL, Ray or the
model without the ``integration`` mark, and lets a marked one through.

It runs a real pytest collection of a throwaway test file with the project's conftest loaded
as a plugin; collecting starts nothing, so this stays a unit test.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

MARKED = "import pytest\n\npytestmark = pytest.mark.integration\n\n"
USES_DB = "def test_uses_the_catalog(db_url):\n    assert db_url\n"


def _collect(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(source)
    ini = tmp_path / "pytest.ini"
    ini.write_text("[pytest]\nmarkers =\n    integration: probe\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "tests.conftest", "-c", str(ini)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(("source", "refused"), [(USES_DB, True), (MARKED + USES_DB, False)])
def test_an_unmarked_integration_test_fails_collection(tmp_path: Path, source: str, refused: bool) -> None:
    out = _collect(tmp_path, source)
    said = "lack the integration mark" in out.stdout + out.stderr
    assert said is refused and (out.returncode != 0) is refused, out.stdout + out.stderr

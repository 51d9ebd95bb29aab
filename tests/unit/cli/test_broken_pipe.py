"""Output piped to a reader that has gone (``ragline jobs list | head``) ends any command
quietly with 141, as a shell reports SIGPIPE: no ``BrokenPipeError`` traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],  # argparse prints, then exits
        ["db", "url"],  # a command's handler prints (the URL set below: no database reached)
    ],
)
def test_a_closed_pipe_ends_the_command_quietly(argv: list[str]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: every write fails with EPIPE
    try:
        out = subprocess.run(
            [sys.executable, "-m", "cli.main", *argv],
            cwd=REPO,
            env={
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "PYTHONPATH": str(REPO),
                "RAGLINE_DATABASE_URL": "postgresql://ragline@db.invalid:5432/ragline",
            },
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert out.returncode == 141, out.stderr
    assert "Traceback" not in out.stderr and "BrokenPipeError" not in out.stderr

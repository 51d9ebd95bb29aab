"""core.stderr_filter: the known line goes, everything else stays, even from C-level writes,
child processes and a process that dies without cleaning up."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
NOTICE = "has constructor arguments in the object store and max_restarts > 0"


def _run(body: str) -> subprocess.CompletedProcess[str]:
    script = textwrap.dedent(
        """
        import os, subprocess, sys
        from core.stderr_filter import filter_stderr
        from jobs.ray_runtime import HARMLESS_NOTICES
        assert filter_stderr(HARMLESS_NOTICES)
        assert not filter_stderr(HARMLESS_NOTICES)  # once per process
        """
    ) + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_only_the_known_notice_is_dropped() -> None:
    out = _run(
        f"""
        os.write(2, b"[E core_worker.cc:2465] Actor 'MapWorker' {NOTICE}. See issue 53727\\n")
        os.write(2, b"[E core_worker.cc:99] a real C++ error\\n")
        print("a Python traceback line", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('from a child\\\\n')"])
        print("stdout is untouched")
        """
    )
    assert out.returncode == 0, out.stderr
    assert NOTICE not in out.stderr
    lines = out.stderr.splitlines()
    assert lines == ["[E core_worker.cc:99] a real C++ error", "a Python traceback line", "from a child"]
    assert out.stdout == "stdout is untouched\n"


def test_last_words_of_a_dying_process_still_arrive() -> None:
    out = _run(
        """
        os.write(2, b"fatal: about to die\\n")
        os.write(2, b"no newline at the end")
        os._exit(3)
        """
    )
    assert out.returncode == 3
    assert out.stderr == "fatal: about to die\nno newline at the end"


def test_a_terminal_stays_a_terminal_for_progress_bars() -> None:
    """With fd 2 a pipe to the filter, ``Progress`` still draws on the original terminal."""
    import os
    import pty

    controller, terminal = pty.openpty()
    script = textwrap.dedent(
        """
        import sys
        from core.progress import Progress
        from core.stderr_filter import filter_stderr, terminal_stderr
        assert filter_stderr(["nothing to drop"])
        print(sys.stderr.isatty(), terminal_stderr().isatty(), Progress(3).stream.isatty())
        """
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", script],
            cwd=REPO,
            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
            stdout=subprocess.PIPE,
            stderr=terminal,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(terminal)
        os.close(controller)
    assert out.returncode == 0
    assert out.stdout.split() == ["False", "True", "True"]

"""Dropping known-harmless lines from this process's stderr, at the file-descriptor level.

Some notices come from C++ (Ray's core worker logs straight to fd 2, below Python's logging
and ``warnings``), so the only place to drop one without lowering a whole log level (which
would hide real errors too) is fd 2 itself. ``filter_stderr`` points fd 2 at a pipe read by
a small child process that copies every line to the original stderr except those holding
one of the given substrings. A child, not a thread: when this process crashes or is killed,
the child still drains the pipe (a fatal error's last words included) and exits at EOF. It
ignores SIGINT/SIGTERM so a Ctrl-C in a terminal cannot cut the server's shutdown logs off;
it ends when every writer (this process and the children that inherited fd 2) has exited.

Once fd 2 is a pipe, ``sys.stderr.isatty()`` is False; ``terminal_stderr()`` is the stream
on the original fd 2, for what must reach the terminal as a terminal (progress bars).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import TextIO

_FILTER = """
import signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
drop = [p.encode() for p in sys.argv[1:]]
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    if not any(p in line for p in drop):
        out.write(line)
        out.flush()
"""

_lock = threading.Lock()
_installed: set[str] = set()
_children: list[subprocess.Popen[bytes]] = []  # referenced for the process's lifetime
_terminal: TextIO | None = None  # the original fd 2, once a filter took its place


def terminal_stderr() -> TextIO:
    """The unfiltered stderr: the original fd 2 when a filter is installed, else ``sys.stderr``."""
    return _terminal or sys.stderr


def filter_stderr(drop: Sequence[str]) -> bool:
    """Drop stderr lines containing any of ``drop`` from now on; returns False when it cannot
    (fd 2 closed, no pipes) or when the same set is already filtered."""
    key = "\0".join(sorted(drop))
    with _lock:
        if key in _installed or not drop:
            return False
        try:
            original = os.dup(2)
        except OSError:
            return False
        read_end, write_end = os.pipe()
        try:
            child = subprocess.Popen(
                [sys.executable, "-c", _FILTER, *drop],
                stdin=read_end,
                stdout=original,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
        except OSError:
            os.close(read_end)
            os.close(write_end)
            os.close(original)
            return False
        _children.append(child)
        os.close(read_end)
        global _terminal
        if _terminal is None:
            _terminal = open(original, "w", buffering=1, encoding="utf-8", errors="backslashreplace")
        else:
            os.close(original)
        sys.stderr.flush()
        os.dup2(write_end, 2)
        os.close(write_end)
        _installed.add(key)
        return True

"""A parse worker whose parent has gone exits quietly: no ``BrokenPipeError`` traceback.

Before issue 23 a worker still starting when its pool closed (a short ``ragline ingest``
ends before the second worker has imported PyMuPDF) wrote its ``("ready",)`` into the
closed socket and printed a traceback into the terminal after a successful ingest; an
answer written after the parent closed did the same.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from multiprocessing.connection import Connection

from ingest.ocr import OcrOptions
from tests.dockerctx import REPO

FAULTY = "tests.unit.ingest.faulty_parser:parse"


def _worker() -> tuple[subprocess.Popen[bytes], Connection]:
    parent, child = socket.socketpair()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, sys.path)])}
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "ingest.parse_worker", str(child.fileno()), "256", FAULTY],
            pass_fds=(child.fileno(),),
            env=env,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
    finally:
        child.close()
    return process, Connection(parent.detach())


def _finish(process: subprocess.Popen[bytes]) -> tuple[int, str]:
    _, err = process.communicate(timeout=120)
    return process.returncode, err.decode(errors="replace")


def test_a_worker_whose_parent_left_before_it_was_ready_exits_quietly() -> None:
    process, conn = _worker()
    conn.close()  # long before the worker has imported its parsers
    code, err = _finish(process)
    assert code == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_a_worker_whose_parent_left_before_the_answer_exits_quietly() -> None:
    process, conn = _worker()
    assert conn.poll(120) and conn.recv() == ("ready",)
    conn.send((30.0, 1_000_000, "text/plain", None, OcrOptions()))
    conn.send_bytes(b"slow")
    conn.close()  # the answer comes a second later, into a closed socket
    code, err = _finish(process)
    assert code == 0 and "Traceback" not in err and "BrokenPipe" not in err, err

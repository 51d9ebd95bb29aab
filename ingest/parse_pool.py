"""A pool of rlimit'd parse worker processes, so a hostile document costs one document.

Each worker (``ingest/parse_worker.py``) is a fresh interpreter with its own socket: one
that dies mid-answer takes nothing down but that socket, and a fresh interpreter carries
none of this process's threads, torch or Ray state (a fork would). Workers are reused
across documents and replaced after ``max_documents`` answers, after a refused allocation,
and after any death, so the next document always finds a healthy one.

Outcomes the pool adds to the parsers' own reason codes:

- ``parse_memory_limit``: an allocation past the worker's memory ceiling was refused;
- ``parse_timeout``: the worker did not answer within the parse timeout plus
  ``KILL_GRACE_SECONDS`` (the parent kills it), or it died of ``SIGXCPU`` (its CPU ceiling).
  The worker's cooperative deadline answers first whenever the parser reaches a page or
  section boundary; the kill catches a parse stuck inside one library call;
- ``parse_crashed``: any other death (a signal, an exit), or a worker that cannot start.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import cast

from core.errors import ParseError
from core.records import ParsedDocument
from ingest.isolation import MEMORY_CODE, InProcessParser, IsolationConfig, Parser, ParseRequest

log = logging.getLogger(__name__)

# The parent's wall-clock kill comes this long after the parse timeout.
KILL_GRACE_SECONDS = 2.0
MAX_DOCUMENTS_PER_WORKER = 100
# A fresh interpreter importing PyMuPDF takes ~1 s, much longer on a loaded machine.
START_TIMEOUT_SECONDS = 120.0
DEFAULT_TARGET = "ingest.isolation:parse_limited"


@dataclass(slots=True)
class _Worker:
    process: subprocess.Popen[bytes]
    conn: Connection
    ready: bool = False
    answered: int = 0


@dataclass(frozen=True, slots=True)
class _Running:
    worker: _Worker
    index: int
    deadline: float


class ParsePool:
    """``workers`` rlimit'd parse processes; concurrent callers take turns.

    ``target`` (``module:function``) is what a worker runs per document; the default is the
    real parser, fault-injection tests name one of their own.
    """

    def __init__(
        self,
        *,
        workers: int,
        memory_mb: int,
        max_documents: int = MAX_DOCUMENTS_PER_WORKER,
        target: str = DEFAULT_TARGET,
    ) -> None:
        self.size = workers
        self.memory_mb = memory_mb
        self.max_documents = max_documents
        self.target = target
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self.replaced = 0  # workers that died, were killed or were recycled

    def start(self) -> None:
        """Start the workers (they import the parsers in the background)."""
        while len(self._idle) < self.size:
            self._idle.append(self._spawn())

    def close(self) -> None:
        with self._lock:
            for worker in self._idle:
                _stop(worker)
            self._idle.clear()

    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self._idle]

    def parse_all(self, requests: Sequence[ParseRequest]) -> list[ParsedDocument | ParseError]:
        """Parse every request on the pool's workers; one answer per request, in order."""
        with self._lock:
            return self._parse_all(requests)

    def _parse_all(self, requests: Sequence[ParseRequest]) -> list[ParsedDocument | ParseError]:
        results: list[ParsedDocument | ParseError | None] = [None] * len(requests)
        queue = deque(range(len(requests)))
        running: list[_Running] = []
        try:
            while queue or running:
                while queue and len(running) < self.size:
                    index = queue.popleft()
                    worker = self._dispatch(requests[index])
                    if worker is None:
                        results[index] = ParseError("no parse worker could start", code="parse_crashed")
                        continue
                    deadline = time.monotonic() + requests[index].timeout_seconds + KILL_GRACE_SECONDS
                    running.append(_Running(worker, index, deadline))
                if running:
                    running = self._collect(running, results)
        finally:
            for run in running:  # interrupted (KeyboardInterrupt): their answers are lost
                _stop(run.worker)
        return [r if r is not None else ParseError("no answer", code="parse_crashed") for r in results]

    def _dispatch(self, request: ParseRequest) -> _Worker | None:
        """Hand ``request`` to a ready worker (a fresh one if the idle one died meanwhile)."""
        for _ in range(2):
            worker = self._idle.pop() if self._idle else self._spawn()
            try:
                if not worker.ready:
                    _await_ready(worker)
                _send(worker.conn, request)
                return worker
            except (OSError, EOFError, TimeoutError) as exc:
                log.warning("parse worker %s unusable (%s): replaced", worker.process.pid, type(exc).__name__)
                self._retire(worker)
        return None

    def _collect(
        self, running: list[_Running], results: list[ParsedDocument | ParseError | None]
    ) -> list[_Running]:
        timeout = max(0.0, min(r.deadline for r in running) - time.monotonic())
        ready = {id(c) for c in wait([r.worker.conn for r in running], timeout=timeout)}
        still: list[_Running] = []
        now = time.monotonic()
        for run in running:
            if id(run.worker.conn) in ready:
                results[run.index] = self._answer(run.worker)
            elif now >= run.deadline:
                log.warning("parse worker %s passed the parse timeout: killed", run.worker.process.pid)
                self._retire(run.worker)
                results[run.index] = ParseError(
                    "parsing took longer than the parse timeout (its worker was killed)", code="parse_timeout"
                )
            else:
                still.append(run)
        return still

    def _answer(self, worker: _Worker) -> ParsedDocument | ParseError:
        try:
            reply = cast(ParsedDocument | ParseError, worker.conn.recv())
        except (EOFError, OSError):
            self._retire(worker)
            return _death(worker.process)
        worker.answered += 1
        refused = isinstance(reply, ParseError) and reply.code == MEMORY_CODE
        if refused or worker.answered >= self.max_documents:
            self._retire(worker)  # after a refused allocation it exits by itself
        else:
            self._idle.append(worker)
        return reply

    def _spawn(self) -> _Worker:
        parent, child = socket.socketpair()
        env = dict(os.environ)
        # The same code as this process (a test's or a worktree's path first), one BLAS thread.
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = "1"
        argv = [
            sys.executable,
            "-m",
            "ingest.parse_worker",
            str(child.fileno()),
            str(self.memory_mb),
            self.target,
        ]
        try:
            process = subprocess.Popen(argv, env=env, pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL)
        finally:
            child.close()
        return _Worker(process, Connection(parent.detach()))

    def _retire(self, worker: _Worker) -> None:
        _stop(worker)
        self.replaced += 1
        if len(self._idle) < self.size:
            self._idle.append(self._spawn())


def make_parser(config: IsolationConfig) -> Parser:
    """A started ``ParsePool`` when isolation is on, else an ``InProcessParser``."""
    if not config.enabled:
        return InProcessParser()
    pool = ParsePool(workers=config.workers, memory_mb=config.memory_mb)
    pool.start()
    return pool


def _await_ready(worker: _Worker) -> None:
    if not worker.conn.poll(START_TIMEOUT_SECONDS):
        raise TimeoutError("the parse worker did not start")
    if worker.conn.recv() != ("ready",):
        raise EOFError("the parse worker sent no ready message")
    worker.ready = True


def _send(conn: Connection, request: ParseRequest) -> None:
    source = request.source
    conn.send((request.timeout_seconds, request.max_chars, source.mime_type, source.title, request.ocr))
    conn.send_bytes(source.content)  # as is: no pickled copy of a large payload


def _stop(worker: _Worker) -> None:
    worker.conn.close()
    try:
        worker.process.wait(0.5)  # a worker whose socket closes exits at once
    except subprocess.TimeoutExpired:
        worker.process.kill()
        worker.process.wait(5)


def _death(process: subprocess.Popen[bytes]) -> ParseError:
    try:
        code = process.wait(5)
    except subprocess.TimeoutExpired:
        process.kill()
        code = process.wait(5)
    if code == -signal.SIGXCPU:
        return ParseError("parsing used more CPU time than the parse timeout", code="parse_timeout")
    if code < 0:
        return ParseError(f"the parse worker died of {signal.Signals(-code).name}", code="parse_crashed")
    return ParseError(f"the parse worker exited unexpectedly (status {code})", code="parse_crashed")

"""The parse worker process: ``python -m ingest.parse_worker FD MEMORY_MB TARGET``.

Started by ``ParsePool`` (``ingest/parse_pool.py``) as a fresh interpreter, never a fork of
the ingesting process (whose threads, torch or Ray state a fork would copy). It talks over
the socket ``FD``: it answers ``("ready",)`` once its limits are set, then, per document, a
header and the raw bytes in, and a ``ParsedDocument`` or a ``ParseError`` out.

Limits, set here because only the process itself can set them after start-up:

- ``RLIMIT_DATA`` and ``RLIMIT_AS`` at the idle size plus ``MEMORY_MB``: an allocation past
  that fails (``MemoryError``, or MuPDF's "malloc failed"); the document gets
  ``parse_memory_limit`` and the worker exits, so a damaged heap is never reused;
- ``RLIMIT_CPU`` at the CPU time used so far plus the parse timeout, renewed per document:
  a parse stuck in one C call past it dies of ``SIGXCPU``;
- ``RLIMIT_CORE`` 0: a crash leaves no core file.
"""

from __future__ import annotations

import importlib
import math
import resource
import signal
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import cast

from core.errors import ParseError
from core.records import ParsedDocument, SourceDocument
from ingest.isolation import MEMORY_CODE, MEMORY_MESSAGE, ParseRequest

ParseTarget = Callable[[ParseRequest], ParsedDocument]


def main(argv: list[str]) -> None:
    fd, memory_mb, target_name = int(argv[0]), int(argv[1]), argv[2]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    conn = Connection(fd)
    target = _resolve(target_name)
    _warm_imports()
    _limit_memory(memory_mb)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if not _reply(conn, ("ready",)):
        return
    while _serve_one(conn, target):
        pass


def _reply(conn: Connection, message: object) -> bool:
    """Send ``message``; False when the parent has gone (its pool closed while this worker
    was starting or parsing): nobody is left to answer, so the worker just exits, without a
    traceback in the terminal it shares with the parent."""
    try:
        conn.send(message)
    except OSError:  # BrokenPipeError, ConnectionResetError
        return False
    return True


def _serve_one(conn: Connection, target: ParseTarget) -> bool:
    """Parse one document; False when the worker should exit."""
    try:
        timeout, max_chars, mime_type, title, ocr = conn.recv()
        content = conn.recv_bytes()
    except (EOFError, OSError):  # the parent closed the socket or died
        return False
    _limit_cpu(timeout)
    request = ParseRequest(SourceDocument("", "", mime_type, content, title), timeout, max_chars, ocr)
    del content
    reply: ParsedDocument | ParseError
    try:
        reply = target(request)
    except ParseError as exc:
        reply = exc
    except MemoryError:
        reply = ParseError(MEMORY_MESSAGE, code=MEMORY_CODE)
    except Exception as exc:  # the contract: a reason code, never a traceback
        reply = ParseError(f"parsing failed: {type(exc).__name__}", code="parse_failed")
    del request
    if not _reply(conn, reply):
        return False
    # After a refused allocation the heap may be fragmented or a library's state damaged.
    return not (isinstance(reply, ParseError) and reply.code == MEMORY_CODE)


def _resolve(name: str) -> ParseTarget:
    module, _, attr = name.partition(":")
    return cast(ParseTarget, getattr(importlib.import_module(module), attr))


def _warm_imports() -> None:
    """Import the parser libraries before the address space is capped: loading a shared
    library under a tight RLIMIT_AS fails."""
    for module in (
        "pymupdf",
        "lxml.etree",
        "docx",
        "pptx",
        "openpyxl",
        "PIL.Image",
        "pytesseract",
        "ebooklib",
    ):
        try:
            importlib.import_module(module)
        except ImportError:
            pass


def _status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _limit_memory(memory_mb: int) -> None:
    extra = memory_mb * 1024 * 1024
    for limit, field in ((resource.RLIMIT_DATA, "VmData"), (resource.RLIMIT_AS, "VmSize")):
        try:
            base = _status_kib(field) * 1024
        except OSError:  # no /proc: cap the total instead
            base = 0
        _lower(limit, base + extra)


def _limit_cpu(timeout_seconds: float) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    _lower(resource.RLIMIT_CPU, math.ceil(usage.ru_utime + usage.ru_stime + timeout_seconds) + 1)


def _lower(limit: int, soft: int) -> None:
    """Set the soft limit only: the hard one stays, so the next document may raise it again."""
    _, hard = resource.getrlimit(limit)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(limit, (soft, hard))


if __name__ == "__main__":
    main(sys.argv[1:])

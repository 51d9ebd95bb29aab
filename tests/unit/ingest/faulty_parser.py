"""A parse target for ``ParsePool`` fault injection: the content names the fault.

Anything else is parsed for real, so one pool serves both the faults and the recovery.
"""

from __future__ import annotations

import os
import signal
import time

from core.records import ParsedDocument
from ingest.isolation import ParseRequest, parse_limited


def parse(request: ParseRequest) -> ParsedDocument:
    fault = request.source.content
    if fault == b"segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif fault == b"exit":
        os._exit(3)
    elif fault == b"xcpu":
        os.kill(os.getpid(), signal.SIGXCPU)
    elif fault == b"hang":  # asleep inside one call: only the parent's kill ends it
        time.sleep(3600)
    elif fault == b"spin":  # CPU-bound inside one call: RLIMIT_CPU or the kill ends it
        while True:
            pass
    elif fault == b"eat":  # 4 GiB, far past the test pool's memory limit
        hoard = [bytearray(64 << 20) for _ in range(64)]
        return ParsedDocument(text=str(len(hoard)), sections=())
    elif fault == b"slow":  # answers after a second: time for the parent to go away first
        time.sleep(1.0)
        return ParsedDocument(text="slow", sections=())
    elif fault == b"pid":
        return ParsedDocument(text=str(os.getpid()), sections=())
    return parse_limited(request)

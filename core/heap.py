"""The server's start-up heap, moved out of the cyclic garbage collector's sight.

A serving process holds hundreds of thousands of long-lived Python objects once its models,
tokenizer and index are loaded (about 600,000 in ``bench.tracing``'s server), and every full
(generation 2) collection walks all of them: 300-500 ms with the event loop stopped, so every
request in flight waits that long. Full collections come when enough new objects survive into
the old generation; spans waiting up to a second in the batch span processor's queue are such
objects, so tracing made these pauses more frequent and they were the whole of its p99 (docs/
benchmarks.md, tracing section). ``gc.freeze`` after start-up leaves the start-up objects out
of every later collection: a full collection then walks only what came after (milliseconds).
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def freeze_startup_heap() -> int:
    """Collect once, then freeze every surviving object (never scanned again, never freed
    while frozen); returns how many were frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("start-up heap frozen: %d objects out of the garbage collector's scans", frozen)
    return frozen


def unfreeze_heap() -> None:
    """Give frozen objects back to the collector (at shutdown: an app that closes in a process
    that lives on, such as a test run, frees its cycles again)."""
    gc.unfreeze()

"""Appends audit events in batches off the request path.

The request thread only puts an event on a bounded queue (``submit`` never blocks); a
writer thread takes up to ``batch_size`` events, or what arrived within ``flush_s`` of the
first one, and appends them with one COPY. A full queue or a failed write drops events and
counts them (``dropped``), so a slow database costs audit entries, never request latency.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from psycopg_pool import ConnectionPool

from catalog import audit
from catalog.audit import AuditEvent

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AuditWriterConfig:
    batch_size: int
    flush_s: float
    queue_size: int


class AuditWriter:
    """A background batch writer of :class:`AuditEvent` s; ``start()`` then ``close()``.

    ``on_written`` and ``on_dropped`` get the count of each batch (the metrics hook).
    """

    def __init__(
        self,
        pool: ConnectionPool,
        config: AuditWriterConfig,
        *,
        on_written: Callable[[int], None] | None = None,
        on_dropped: Callable[[int], None] | None = None,
    ) -> None:
        self.pool = pool
        self.config = config
        self._queue: queue.Queue[AuditEvent | None] = queue.Queue(maxsize=config.queue_size)
        self._thread = threading.Thread(target=self._loop, name="audit-writer", daemon=True)
        self._on_written = on_written or (lambda n: None)
        self._on_dropped = on_dropped or (lambda n: None)
        self.written = 0
        self.dropped = 0
        self._idle = threading.Condition()

    def start(self) -> None:
        self._thread.start()

    def submit(self, event: AuditEvent) -> bool:
        """Queue ``event``; False (and counted as dropped) when the queue is full or the event
        does not have its action's shape (checked here, so it never costs a batch its COPY)."""
        try:
            audit.check(event.action, event.details)
        except ValueError:
            log.exception("audit event refused")
            self._drop(1)
            return False
        try:
            self._queue.put_nowait(event)
            return True
        except queue.Full:
            self._drop(1)
            return False

    @property
    def queue_depth(self) -> int:
        return self._queue.qsize()

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until every event queued so far is written or dropped (tests, shutdown)."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._queue.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._idle.wait(min(left, 0.05))
        return True

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what is queued, then stop."""
        if not self._thread.is_alive():
            return
        self.flush(timeout_s)
        self._queue.put(None)
        self._thread.join(timeout_s)

    def _drop(self, n: int) -> None:
        self.dropped += n
        self._on_dropped(n)

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                self._queue.task_done()
                return
            batch = [first]
            stop = self._fill(batch, deadline=time.monotonic() + self.config.flush_s)
            self._write(batch)
            for _ in range(len(batch) + (1 if stop else 0)):
                self._queue.task_done()
            with self._idle:
                self._idle.notify_all()
            if stop:
                return

    def _fill(self, batch: list[AuditEvent], *, deadline: float) -> bool:
        """Add events until the batch is full or the deadline passes; True on the stop signal."""
        while len(batch) < self.config.batch_size:
            left = deadline - time.monotonic()
            try:
                event = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
            except queue.Empty:
                return False
            if event is None:
                return True
            batch.append(event)
        return False

    def _write(self, batch: list[AuditEvent]) -> None:
        try:
            with self.pool.connection() as conn:
                audit.record_many(conn, events=batch)
        except Exception:  # the database is away: count the loss, keep serving
            log.exception("audit batch of %d events not written", len(batch))
            self._drop(len(batch))
            return
        self.written += len(batch)
        self._on_written(len(batch))

"""What the retrieve route records about each answer, at the edge of the request path.

``RetrieveObserver.observe`` is O(1) in the index size: a few counter and histogram
updates, one audit event put on the batch writer's queue, and one integer comparison for
the freshness probe. The database writes and reads happen on background threads.

``ChangeVisibilityProbe`` measures push-to-searchable and delete-to-invisible latency: a
response that searched a view caught up to catalog position P reflects every change up to
P, so the first response on this node past a change's position is when it became visible
here. The probe thread reads those changes' commit times and observes the differences.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psycopg
from psycopg_pool import ConnectionPool

from catalog import changes as changes_repo
from catalog import jobs as jobs_repo
from core import metrics
from jobs.audit_writer import AuditWriter
from services.search import RetrieveAudit, retrieve_event

if TYPE_CHECKING:  # the foundation app does not import the search stack
    from retrieve.service import RetrieveResult

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ObserveConfig:
    tenant_labels: bool
    store_query_text: bool


class ChangeVisibilityProbe:
    """Turns "a response reflected catalog position P" into freshness latency observations."""

    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self._seen = -1  # the first response sets the baseline: older changes are not timed
        self._ranges: deque[tuple[int, int, float]] = deque(maxlen=1024)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="change-visibility", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5)

    def note(self, position: int) -> None:
        """A response just reflected every change up to ``position`` (request path: O(1))."""
        if position <= self._seen:
            return
        with self._lock:
            if position <= self._seen:
                return
            if self._seen >= 0:
                self._ranges.append((self._seen, position, time.time()))
            self._seen = position
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            while self._ranges:
                self._observe(*self._ranges.popleft())

    def _observe(self, after: int, upto: int, seen_at: float) -> None:
        try:
            with self.pool.connection() as conn:
                found = changes_repo.change_times(conn, after=after, upto=upto, kinds=("version", "delete"))
        except Exception:  # a lost observation; never the request's problem
            log.warning("freshness probe could not read change times", exc_info=True)
            return
        for change in found:
            lag = max(0.0, seen_at - change.created_at.timestamp())
            histogram = (
                metrics.PUSH_TO_SEARCHABLE if change.kind == "version" else metrics.DELETE_TO_INVISIBLE
            )
            histogram.observe(lag)


class RetrieveObserver:
    """Records metrics, the audit event and freshness for one answered retrieve."""

    def __init__(self, config: ObserveConfig, probe: ChangeVisibilityProbe | None = None) -> None:
        self.config = config
        self.probe = probe
        self.audit: AuditWriter | None = None  # set by the audit hook when retrieves are audited

    def observe(self, result: RetrieveResult, info: RetrieveAudit) -> None:
        """Metrics, freshness and (when retrieves are audited) the entry of one answer; the
        entry names the model the answer names (``services.search.retrieve_event``)."""
        for stage, ms in result.timings_ms.items():
            metrics.RETRIEVE_STAGE.labels(stage).observe(ms / 1000.0)
        for d in result.degraded:
            metrics.RETRIEVE_DEGRADED.labels(d["stage"], metrics.degraded_reason(d["reason"])).inc()
        if self.config.tenant_labels:
            metrics.RETRIEVES_BY_TENANT.labels(info.principal.tenant_id).inc()
        if self.probe is not None:
            self.probe.note(info.catalog_position)
        if self.audit is not None:
            self.audit.submit(retrieve_event(result, info, store_query_text=self.config.store_query_text))


def record_job_outcome(conn: psycopg.Connection, job_id: uuid.UUID, state: str) -> None:
    """The ingest runner's completion hook: documents, chunks and failures by reason."""
    metrics.JOBS_FINISHED.labels(state).inc()
    job = jobs_repo.get_job(conn, job_id=job_id)
    if job is None:
        return
    failed, unchanged = job.documents_failed, job.documents_unchanged
    metrics.INGEST_DOCUMENTS.labels("succeeded").inc(max(0, job.documents_done - failed - unchanged))
    metrics.INGEST_DOCUMENTS.labels("unchanged").inc(unchanged)
    metrics.INGEST_DOCUMENTS.labels("failed").inc(failed)
    metrics.INGEST_CHUNKS.inc(job.chunks)
    for reason, n in jobs_repo.item_failures(conn, job_id=job_id).items():
        metrics.INGEST_FAILURES.labels(reason).inc(n)

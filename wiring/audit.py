"""The retrieve audit writer, with its metrics hooks."""

from __future__ import annotations

from psycopg_pool import ConnectionPool

from core import metrics
from core.settings import Settings
from jobs.audit_writer import AuditWriter, AuditWriterConfig


def audit_writer(settings: Settings, pool: ConnectionPool) -> AuditWriter | None:
    """The (not yet started) batch writer of retrieve audits; None when ``audit.retrieves`` is off."""
    a = settings.audit
    if not a.retrieves:
        return None
    config = AuditWriterConfig(batch_size=a.batch_size, flush_s=a.flush_ms / 1000.0, queue_size=a.queue_size)
    return AuditWriter(
        pool, config, on_written=metrics.AUDIT_WRITTEN.inc, on_dropped=metrics.AUDIT_DROPPED.inc
    )

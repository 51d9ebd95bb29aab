"""The deployment status report from the settings."""

from __future__ import annotations

import psycopg

from core.settings import Settings
from jobs.status import StatusReport, status_report
from wiring.index import LIVE_ALIAS


def deployment_status(
    settings: Settings, conn: psycopg.Connection, *, tenant_id: str | None = None
) -> StatusReport:
    """What ``ragline status`` and ``GET /v1/admin/status`` report for the live alias (one
    tenant's share of it with ``tenant_id``)."""
    return status_report(
        conn,
        alias=LIVE_ALIAS,
        model=settings.embedding_model,
        index_root=settings.index_dir,
        tenant_id=tenant_id,
    )

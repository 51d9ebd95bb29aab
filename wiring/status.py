"""The deployment status report from the settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

import psycopg

from core.settings import Settings
from services import status
from services.status import StatusReport
from wiring.index import LIVE_ALIAS

if TYPE_CHECKING:
    from retrieve.service import SearchService


def deployment_status(
    settings: Settings,
    conn: psycopg.Connection,
    *,
    tenant_id: str | None = None,
    search: SearchService | None = None,
) -> StatusReport:
    """What ``ragline status`` and ``GET /v1/admin/status`` report for the live alias (one
    tenant's share of it with ``tenant_id``; this node's view with the API's ``search``)."""
    return status.deployment_status(
        conn,
        alias=LIVE_ALIAS,
        default_model=settings.embedding_model,
        index_root=settings.index_dir,
        tenant_id=tenant_id,
        search=search,
    )

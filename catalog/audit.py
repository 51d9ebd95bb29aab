"""The append-only audit log (a trigger refuses UPDATE and DELETE)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.types.json import Jsonb


def record(
    conn: psycopg.Connection,
    *,
    actor: str,
    action: str,
    tenant_id: str | None = None,
    target: str | None = None,
    details: Mapping[str, Any] | None = None,
) -> None:
    conn.execute(
        "INSERT INTO audit_log (tenant_id, actor, action, target, details) VALUES (%s, %s, %s, %s, %s)",
        (tenant_id, actor, action, target, Jsonb(dict(details or {}))),
    )

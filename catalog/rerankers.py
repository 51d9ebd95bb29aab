"""Per-tenant rerankers (migration 121): the model a tenant's retrieves rerank with, on only
when its gate passed (``ragline reranker gate``). No row: the server's [rerank] model, if any."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from catalog.changes import record_change


@dataclass(frozen=True, slots=True)
class TenantReranker:
    """A tenant's reranker row: ``enabled`` False keeps reranking off for the tenant."""

    tenant_id: str
    model: str | None
    enabled: bool
    gate: dict[str, Any] | None  # the last gate's report (None: turned off without one)
    decided_at: datetime
    decided_by: str


_COLUMNS = "tenant_id, model, enabled, gate, decided_at, decided_by"


def tenant_reranker(conn: psycopg.Connection, *, tenant_id: str) -> TenantReranker | None:
    """The tenant's row, or None when it has none."""
    with conn.cursor(row_factory=class_row(TenantReranker)) as cur:
        return cur.execute(
            f"SELECT {_COLUMNS} FROM tenant_reranker WHERE tenant_id = %s", (tenant_id,)
        ).fetchone()


def tenant_reranker_at(conn: psycopg.Connection, *, tenant_id: str) -> tuple[TenantReranker | None, int]:
    """The tenant's row and the change-feed position it was read at, in one statement (one
    snapshot): a serving node keeps it until it applies a later ``reranker`` change of the
    tenant (as ``catalog.fusion.tenant_defaults_at``)."""
    row = conn.execute(
        "SELECT (SELECT coalesce(max(seq), 0) FROM catalog_changes),"
        " r.tenant_id, r.model, r.enabled, r.gate, r.decided_at, r.decided_by"
        " FROM (SELECT 1) AS one LEFT JOIN tenant_reranker AS r ON r.tenant_id = %s",
        (tenant_id,),
    ).fetchone()
    if row is None:  # the outer query always yields its one row
        raise RuntimeError("tenant_reranker_at returned nothing")
    found = row[1] is not None
    return (TenantReranker(*row[1:]) if found else None), int(row[0])


def set_tenant_reranker(
    conn: psycopg.Connection,
    *,
    tenant_id: str,
    model: str | None,
    enabled: bool,
    gate: dict[str, Any] | None,
    actor: str,
) -> None:
    """Replace the tenant's row (a change of kind ``reranker``: every node re-reads it)."""
    conn.execute(
        f"INSERT INTO tenant_reranker ({_COLUMNS})"
        " VALUES (%(tenant_id)s, %(model)s, %(enabled)s, %(gate)s, now(), %(actor)s)"
        " ON CONFLICT (tenant_id) DO UPDATE SET model = EXCLUDED.model, enabled = EXCLUDED.enabled,"
        " gate = EXCLUDED.gate, decided_at = now(), decided_by = EXCLUDED.decided_by",
        {
            "tenant_id": tenant_id,
            "model": model,
            "enabled": enabled,
            "gate": Jsonb(gate) if gate is not None else None,
            "actor": actor,
        },
    )
    record_change(conn, tenant_id=tenant_id, kind="reranker")


def tenant_exists(conn: psycopg.Connection, *, tenant_id: str) -> bool:
    return conn.execute("SELECT 1 FROM tenants WHERE tenant_id = %s", (tenant_id,)).fetchone() is not None


def all_tenant_rerankers(conn: psycopg.Connection) -> list[TenantReranker]:
    """Every tenant's row, by tenant (``ragline status``)."""
    with conn.cursor(row_factory=class_row(TenantReranker)) as cur:
        return cur.execute(f"SELECT {_COLUMNS} FROM tenant_reranker ORDER BY tenant_id").fetchall()

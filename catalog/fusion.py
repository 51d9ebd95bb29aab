"""Per-tenant fusion defaults (migration 090): what ``/v1/retrieve`` uses for a tenant when the
request names no fusion of its own. ``None`` in a field means "the server's setting"."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Literal

import psycopg
from psycopg.rows import class_row

from catalog.changes import record_change

FusionMethod = Literal["rrf", "convex"]


@dataclass(frozen=True, slots=True)
class FusionOverride:
    """Fusion fields that replace the ones beneath them (settings < tenant < request)."""

    method: FusionMethod | None = None
    rrf_k: int | None = None
    dense_weight: float | None = None
    lexical_weight: float | None = None
    dense_candidates: int | None = None
    lexical_candidates: int | None = None

    def given(self) -> dict[str, object]:
        """The fields that are set."""
        return {k: v for k, v in asdict(self).items() if v is not None}


_COLUMNS = ", ".join(f.name for f in fields(FusionOverride))


def tenant_defaults(conn: psycopg.Connection, *, tenant_id: str) -> FusionOverride | None:
    """The tenant's stored defaults, or None when it has none."""
    with conn.cursor(row_factory=class_row(FusionOverride)) as cur:
        return cur.execute(
            f"SELECT {_COLUMNS} FROM tenant_fusion WHERE tenant_id = %s", (tenant_id,)
        ).fetchone()


def tenant_defaults_at(conn: psycopg.Connection, *, tenant_id: str) -> tuple[FusionOverride | None, int]:
    """The tenant's stored defaults and the change-feed position they were read at, in one
    statement (one snapshot): a serving node may keep them until it applies a later ``fusion``
    change of the tenant."""
    row = conn.execute(
        "SELECT (SELECT coalesce(max(seq), 0) FROM catalog_changes), f.tenant_id,"
        f" {', '.join('f.' + f.name for f in fields(FusionOverride))}"
        " FROM (SELECT 1) AS one LEFT JOIN tenant_fusion AS f ON f.tenant_id = %s",
        (tenant_id,),
    ).fetchone()
    if row is None:  # the outer query always yields its one row
        raise RuntimeError("tenant_defaults_at returned nothing")
    position, found = int(row[0]), row[1] is not None
    return (FusionOverride(*row[2:]) if found else None), position


def set_tenant_defaults(
    conn: psycopg.Connection, *, tenant_id: str, defaults: FusionOverride, actor: str
) -> None:
    """Replace the tenant's defaults with ``defaults`` (unset fields fall back to settings)."""
    values = asdict(defaults)
    placeholders = ", ".join(f"%({k})s" for k in values)
    updates = ", ".join(f"{k} = EXCLUDED.{k}" for k in values)
    conn.execute(
        f"INSERT INTO tenant_fusion (tenant_id, {_COLUMNS}, updated_by)"
        f" VALUES (%(tenant_id)s, {placeholders}, %(actor)s)"
        f" ON CONFLICT (tenant_id) DO UPDATE SET {updates}, updated_by = EXCLUDED.updated_by,"
        " updated_at = now()",
        {**values, "tenant_id": tenant_id, "actor": actor},
    )
    record_change(conn, tenant_id=tenant_id, kind="fusion")


def clear_tenant_defaults(conn: psycopg.Connection, *, tenant_id: str) -> bool:
    """Drop the tenant's defaults; True when it had some."""
    had = conn.execute("DELETE FROM tenant_fusion WHERE tenant_id = %s", (tenant_id,)).rowcount > 0
    if had:
        record_change(conn, tenant_id=tenant_id, kind="fusion")
    return had


def all_tenant_defaults(conn: psycopg.Connection) -> dict[str, FusionOverride]:
    """Every tenant's stored defaults, by tenant (``ragline status``)."""
    rows = conn.execute(f"SELECT tenant_id, {_COLUMNS} FROM tenant_fusion ORDER BY tenant_id").fetchall()
    return {row[0]: FusionOverride(*row[1:]) for row in rows}

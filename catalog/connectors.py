"""Connector sync state: a cursor and per-item fingerprints per (tenant, connector).

An incremental connector reads this at the start of a run and merges into it after every
batch the server accepted, so a crash loses at most the batch in flight.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import psycopg
from psycopg.rows import class_row

from catalog.principals import ensure_tenant

ItemKind = Literal["document", "groups"]


@dataclass(frozen=True, slots=True)
class ConnectorState:
    connector: str
    tenant_id: str
    cursor: str | None
    updated_at: datetime | None
    documents: dict[str, str] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _StateRow:
    cursor: str | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class _ItemRow:
    kind: str
    item_key: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class StateChange:
    """A merge into one connector's state; ``cursor=None`` leaves the cursor as it is."""

    cursor: str | None = None
    set_documents: Mapping[str, str] = field(default_factory=dict)
    remove_documents: Sequence[str] = ()
    set_groups: Mapping[str, str] = field(default_factory=dict)
    remove_groups: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class SavedState:
    connector: str
    cursor: str | None
    documents: int
    groups: int
    updated_at: datetime


def get_state(conn: psycopg.Connection, *, tenant_id: str, connector: str) -> ConnectorState:
    """The connector's state; an empty one (no cursor, no items) if it never saved."""
    with conn.cursor(row_factory=class_row(_StateRow)) as cur:
        head = cur.execute(
            "SELECT cursor, updated_at FROM connector_state WHERE tenant_id = %s AND connector = %s",
            (tenant_id, connector),
        ).fetchone()
    if head is None:
        return ConnectorState(connector=connector, tenant_id=tenant_id, cursor=None, updated_at=None)
    with conn.cursor(row_factory=class_row(_ItemRow)) as cur:
        rows = cur.execute(
            "SELECT kind, item_key, fingerprint FROM connector_items"
            " WHERE tenant_id = %s AND connector = %s ORDER BY kind, item_key",
            (tenant_id, connector),
        ).fetchall()
    state = ConnectorState(
        connector=connector, tenant_id=tenant_id, cursor=head.cursor, updated_at=head.updated_at
    )
    for row in rows:
        (state.documents if row.kind == "document" else state.groups)[row.item_key] = row.fingerprint
    return state


def merge_state(
    conn: psycopg.Connection, *, tenant_id: str, connector: str, change: StateChange
) -> SavedState:
    """Apply ``change`` in one transaction (the caller's) and return the counts after it."""
    ensure_tenant(conn, tenant_id=tenant_id)
    conn.execute(
        "INSERT INTO connector_state AS s (tenant_id, connector, cursor) VALUES (%s, %s, %s)"
        " ON CONFLICT (tenant_id, connector) DO UPDATE"
        " SET cursor = COALESCE(EXCLUDED.cursor, s.cursor), updated_at = now()",
        (tenant_id, connector, change.cursor),
    )
    for kind, upserts, removals in (
        ("document", change.set_documents, change.remove_documents),
        ("groups", change.set_groups, change.remove_groups),
    ):
        _merge_items(conn, tenant_id, connector, kind, upserts, removals)
    return _saved(conn, tenant_id, connector)


def _merge_items(
    conn: psycopg.Connection,
    tenant_id: str,
    connector: str,
    kind: str,
    upserts: Mapping[str, str],
    removals: Sequence[str],
) -> None:
    if removals:
        conn.execute(
            "DELETE FROM connector_items WHERE tenant_id = %s AND connector = %s AND kind = %s"
            " AND item_key = ANY(%s)",
            (tenant_id, connector, kind, list(removals)),
        )
    if upserts:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO connector_items (tenant_id, connector, kind, item_key, fingerprint)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (tenant_id, connector, kind, item_key)"
                " DO UPDATE SET fingerprint = EXCLUDED.fingerprint, updated_at = now()",
                [(tenant_id, connector, kind, key, fp) for key, fp in upserts.items()],
            )


@dataclass(frozen=True, slots=True)
class _CountRow:
    cursor: str | None
    updated_at: datetime
    documents: int
    groups: int


def _saved(conn: psycopg.Connection, tenant_id: str, connector: str) -> SavedState:
    with conn.cursor(row_factory=class_row(_CountRow)) as cur:
        row = cur.execute(
            "SELECT s.cursor, s.updated_at,"
            " count(i.item_key) FILTER (WHERE i.kind = 'document') AS documents,"
            " count(i.item_key) FILTER (WHERE i.kind = 'groups') AS groups"
            " FROM connector_state s LEFT JOIN connector_items i USING (tenant_id, connector)"
            " WHERE s.tenant_id = %s AND s.connector = %s GROUP BY s.cursor, s.updated_at",
            (tenant_id, connector),
        ).fetchone()
    if row is None:  # merge_state just inserted it in this transaction
        raise RuntimeError(f"connector state {connector!r} vanished inside its own transaction")
    return SavedState(
        connector=connector,
        cursor=row.cursor,
        documents=row.documents,
        groups=row.groups,
        updated_at=row.updated_at,
    )


def reset_state(conn: psycopg.Connection, *, tenant_id: str, connector: str) -> bool:
    """Forget the connector's state (its next run sends everything); False if it had none."""
    cur = conn.execute(
        "DELETE FROM connector_state WHERE tenant_id = %s AND connector = %s", (tenant_id, connector)
    )
    return cur.rowcount > 0

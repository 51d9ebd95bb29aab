"""The change feed serving nodes follow to stay exact.

``record_change`` takes a transaction-level advisory lock before drawing the next position,
so positions commit in order: a node that has seen position N has seen every change below
it. Call it last in a transaction to keep the lock short.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.rows import class_row

_CHANGE_LOCK = 0x72676C6368616E
CHANNEL = "ragline_changes"


@dataclass(frozen=True, slots=True)
class Change:
    seq: int
    tenant_id: str
    doc_id: int | None
    kind: str


def record_change(conn: psycopg.Connection, *, tenant_id: str, kind: str, doc_id: int | None = None) -> int:
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_CHANGE_LOCK,))
    row = conn.execute(
        # clock_timestamp(), not the transaction's start: this runs last, next to the commit,
        # and freshness latency is measured from it.
        "INSERT INTO catalog_changes (tenant_id, doc_id, kind, created_at)"
        " VALUES (%s, %s, %s, clock_timestamp()) RETURNING seq",
        (tenant_id, doc_id, kind),
    ).fetchone()
    if row is None:  # INSERT ... RETURNING always yields a row
        raise RuntimeError("catalog_changes insert returned nothing")
    conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, str(row[0])))
    return int(row[0])


def current_position(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT coalesce(max(seq), 0) FROM catalog_changes").fetchone()
    return int(row[0]) if row else 0


def changes_since(conn: psycopg.Connection, *, position: int, limit: int = 100_000) -> list[Change]:
    rows = conn.execute(
        "SELECT seq, tenant_id, doc_id, kind FROM catalog_changes WHERE seq > %s ORDER BY seq LIMIT %s",
        (position, limit),
    ).fetchall()
    return [Change(int(r[0]), r[1], r[2], r[3]) for r in rows]


@dataclass(frozen=True, slots=True)
class ChangeTime:
    seq: int
    kind: str
    created_at: datetime


def change_times(
    conn: psycopg.Connection, *, after: int, upto: int, kinds: Sequence[str], limit: int = 10_000
) -> list[ChangeTime]:
    """When the changes in ``(after, upto]`` of ``kinds`` were recorded, oldest first."""
    with conn.cursor(row_factory=class_row(ChangeTime)) as cur:
        return cur.execute(
            "SELECT seq, kind, created_at FROM catalog_changes"
            " WHERE seq > %s AND seq <= %s AND kind = ANY(%s) ORDER BY seq LIMIT %s",
            (after, upto, list(kinds), limit),
        ).fetchall()


def listen(conn: psycopg.Connection) -> None:
    """Subscribe ``conn`` (autocommit) to change notifications; read them with ``conn.notifies()``."""
    conn.execute(f"LISTEN {CHANNEL}")

"""The append-only audit log (a trigger refuses UPDATE and DELETE; retention goes through
``audit_log_gc()``, migration 003)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One entry to append; ``at`` is the time it happened (now when None)."""

    actor: str
    action: str
    tenant_id: str | None = None
    target: str | None = None
    details: Mapping[str, Any] | None = None
    at: datetime | None = None


@dataclass(frozen=True, slots=True)
class AuditRow:
    seq: int
    at: datetime
    tenant_id: str | None
    actor: str
    action: str
    target: str | None
    details: dict[str, Any]


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


def record_many(conn: psycopg.Connection, *, events: Sequence[AuditEvent]) -> int:
    """Append ``events`` in one COPY (the batch writer's path); returns how many."""
    if not events:
        return 0
    with conn.cursor() as cur:
        with cur.copy("COPY audit_log (at, tenant_id, actor, action, target, details) FROM STDIN") as copy:
            for e in events:
                at = e.at or datetime.now().astimezone()
                copy.write_row((at, e.tenant_id, e.actor, e.action, e.target, Jsonb(dict(e.details or {}))))
    return len(events)


def entries(
    conn: psycopg.Connection,
    *,
    since: datetime | None = None,
    principal: str | None = None,
    action: str | None = None,
    tenant_id: str | None = None,
    limit: int = 100,
) -> list[AuditRow]:
    """Newest first. ``principal`` matches the actor or the principal searched on behalf of."""
    with conn.cursor(row_factory=class_row(AuditRow)) as cur:
        return cur.execute(
            "SELECT seq, at, tenant_id, actor, action, target, details FROM audit_log"
            " WHERE (%(since)s::timestamptz IS NULL OR at >= %(since)s)"
            "   AND (%(action)s::text IS NULL OR action = %(action)s)"
            "   AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s)"
            "   AND (%(principal)s::text IS NULL OR actor = %(principal)s"
            "        OR details->>'on_behalf_of' = %(principal)s)"
            " ORDER BY seq DESC LIMIT %(limit)s",
            {"since": since, "action": action, "tenant": tenant_id, "principal": principal, "limit": limit},
        ).fetchall()


def collect_garbage(conn: psycopg.Connection, *, retention_seconds: float) -> int:
    """Delete entries older than the retention (the one path the trigger lets through)."""
    row = conn.execute(
        "SELECT audit_log_gc(make_interval(secs => %s))", (float(retention_seconds),)
    ).fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True, slots=True)
class LoggedQuery:
    """A retrieve whose text the audit stored (``audit.store_query_text``), and who asked it."""

    tenant_id: str
    principal_id: str  # searched as: the delegated end user when a key acted for one
    query: str
    filtered: bool  # the request carried document filters


# Retrieves read back (newest first) to find the distinct ones: bounds the scan of a large log.
_SCAN_PER_QUERY = 20


def recent_queries(conn: psycopg.Connection, *, limit: int) -> list[LoggedQuery]:
    """The last ``limit`` distinct (tenant, principal, text) retrieves with stored text, newest first."""
    with conn.cursor(row_factory=class_row(LoggedQuery)) as cur:
        return cur.execute(
            "WITH recent AS ("
            "  SELECT seq, tenant_id, coalesce(details->>'on_behalf_of', actor) AS principal_id,"
            "         details->>'query' AS query,"
            "         coalesce(details->'filters', '{}'::jsonb) <> '{}'::jsonb AS filtered"
            "  FROM audit_log WHERE action = 'retrieve' AND tenant_id IS NOT NULL AND details ? 'query'"
            "  ORDER BY seq DESC LIMIT %(scan)s),"
            " latest AS (SELECT DISTINCT ON (tenant_id, principal_id, query) * FROM recent"
            "  ORDER BY tenant_id, principal_id, query, seq DESC)"
            " SELECT tenant_id, principal_id, query, filtered FROM latest ORDER BY seq DESC LIMIT %(limit)s",
            {"scan": limit * _SCAN_PER_QUERY, "limit": limit},
        ).fetchall()

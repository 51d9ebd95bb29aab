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
class Shape:
    """What an action's entries hold: ``target`` names what it points at; ``details`` are the
    keys every entry has, ``optional`` those some have (``via``: api, cli, scheduler, ...)."""

    target: str
    details: frozenset[str]
    optional: frozenset[str] = frozenset()


def _write(target: str, *keys: str, optional: tuple[str, ...] = ()) -> Shape:
    return Shape(target, frozenset((*keys, "via")), frozenset(optional))


# A search's entry (the retrieve observer writes it, off the request path).
_RETRIEVE = Shape(
    "request id",
    frozenset(
        {
            "key_id",
            "on_behalf_of",
            "mode",
            "top_k",
            "filters",
            "chunk_ids",
            "index_version",
            "model",
            "catalog_position",
            "latency_ms",
            "degraded",
        }
    ),
    frozenset({"query"}),
)

# Every action the log holds, one shape each, whichever path (API route, CLI command,
# console, connector, maintenance tick) wrote it: ``record`` refuses anything else, so a new
# write path cannot invent its own names or fields. Add a row here with a new action.
ACTIONS: Mapping[str, Shape] = {
    "ingest.push": _write("job id", "documents", "coalesced"),
    "document.delete": _write("external id", "chunks"),
    "document.acl": _write("external id", "principals", "public"),
    "principal.groups": _write("principal id", "groups"),
    "api_key.create": _write("key id", "roles", "principal", "delegate"),
    "api_key.revoke": _write("key id"),
    "job.cancel": _write("job id", "kind", "state"),
    "job.resume": _write("job id", "kind", "state"),
    "index.rebuild": _write("version id", "model", "shards", "chunks", "reasons"),
    # ``chunking``: documents pointed back at their versions cut with the version's chunking.
    "index.swap": _write("alias", "from", "to", "reasons", optional=("chunking",)),
    "index.gc": _write("deleted version ids", "deleted"),
    # A purge rebuilt the alias: its rollback target's files still hold the purged text.
    "index.forget_rollback": _write("alias", "version", "reason"),
    "reembed.start": _write(
        "model",
        "job_id",
        "from",
        "model",
        "chunking",
        "index_kind",
        "shards",
        "gate_dataset",
        "gate_tolerance",
        "query_file",
        "force",
    ),
    "reembed.swap": _write(
        "alias", "job_id", "from", "to", "model", "gate_passed", "forced", optional=("chunking",)
    ),
    "schedule.add": _write("schedule id", "job", "cron", "args"),
    "schedule.remove": _write("schedule id"),
    "connector.state": _write(
        "connector", "cursor", "set_documents", "remove_documents", "set_groups", "remove_groups"
    ),
    "connector.reset": _write("connector", "had_state"),
    "fusion.set": _write("tenant id", "fusion"),  # fusion None: the tenant's defaults were dropped
    # ``ragline tune``: fusion = what was stored (None: not applied), current/winner described,
    # the mean held-out nDCG@10 difference and its 95% bootstrap interval [low, high].
    "fusion.tune": _write(
        "tenant id",
        "applied",
        "forced",
        "fusion",
        "current",
        "winner",
        "queries",
        "folds",
        "ndcg_difference",
        "interval",
        "sources",
    ),
    # ``ragline reranker gate``: the model, whether it is on now, forced off, and the gate's
    # numbers (nDCG@10 without/with, the mean difference and its 95% interval, queries), the
    # rerank latency it measured against the budget and why it refused the model (issue 44).
    "reranker.gate": _write(
        "tenant id",
        "model",
        "enabled",
        "passed",
        "forced_off",
        "ndcg_without",
        "ndcg_with",
        "ndcg_difference",
        "interval",
        "queries",
        "sources",
        "latency",
        "refused",
    ),  # fmt: skip
    "reranker.off": _write("tenant id", "model", "had_row"),  # ``ragline reranker off``
    # ``ragline adapt``: the models written (not served: reembed and the reranker gate decide),
    # examples mined by kind, each model's steps/seconds/losses, wall seconds and peak RSS.
    "model.adapt": _write(
        "tenant id", "out_dir", "examples", "embedder", "reranker", "seconds", "peak_rss_mib"
    ),
    "feedback.record": _write("request id", "feedback_id", "grade", "by"),
    "console.search_as": _write("principal id"),
    "console.explain": _write("principal id"),
    "schema.migrate": Shape("migration", frozenset({"checksum"})),
    "document.purge": _write("external id", "deleted_now", "versions", "chunks", "job_items", "attachments"),
    "retention.purge": _write("", "versions", "chunks", "documents", "job_payloads"),
    "retrieve": _RETRIEVE,
    # Every console search (POST /v1/admin/retrieve), searched as anyone, the admin included.
    "admin.retrieve": _RETRIEVE,
}


def check(action: str, details: Mapping[str, Any] | None) -> None:
    """Raise ValueError unless ``details`` has exactly the keys ``action``'s shape names."""
    shape = ACTIONS.get(action)
    if shape is None:
        raise ValueError(f"unknown audit action {action!r}: add its shape to catalog.audit.ACTIONS")
    keys = set(details or {})
    missing, extra = shape.details - keys, keys - shape.details - shape.optional
    if missing or extra:
        raise ValueError(f"audit {action}: missing {sorted(missing)}, unexpected {sorted(extra)}")


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
    """Append one entry in the caller's transaction (see ``ACTIONS`` for its shape)."""
    check(action, details)
    conn.execute(
        "INSERT INTO audit_log (tenant_id, actor, action, target, details) VALUES (%s, %s, %s, %s, %s)",
        (tenant_id, actor, action, target, Jsonb(dict(details or {}))),
    )


def record_many(conn: psycopg.Connection, *, events: Sequence[AuditEvent]) -> int:
    """Append ``events`` in one COPY (the batch writer's path); returns how many."""
    if not events:
        return 0
    for e in events:
        check(e.action, e.details)
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


def erase_queries(conn: psycopg.Connection, *, tenant_id: str, chunk_ids: Sequence[str]) -> list[str]:
    """Remove the stored query text of ``tenant_id``'s searches that returned any of
    ``chunk_ids`` (an erasure: the text may quote the erased document); the entries stay.
    Returns those searches' request ids (feedback may have copied their text)."""
    if not chunk_ids:
        return []
    rows = conn.execute(
        "SELECT DISTINCT target FROM audit_log WHERE tenant_id = %s AND details ? 'query'"
        " AND jsonb_typeof(details->'chunk_ids') = 'array' AND details->'chunk_ids' ?| %s::text[]",
        (tenant_id, list(chunk_ids)),
    ).fetchall()
    conn.execute("SELECT audit_log_erase_queries(%s, %s::text[])", (tenant_id, list(chunk_ids)))
    return [str(r[0]) for r in rows if r[0] is not None]


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

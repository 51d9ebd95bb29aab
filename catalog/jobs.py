"""Jobs and job items: durable, resumable units of ingestion work.

An item's outcome, its document version and the job counters are written in one
transaction, so a job resumed after a crash redoes exactly the items still ``pending``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import psycopg
from psycopg.rows import class_row, kwargs_row
from psycopg.types.json import Jsonb

from core.records import Acl

TERMINAL = frozenset({"succeeded", "failed", "partially_failed", "cancelled"})


@dataclass(frozen=True, slots=True)
class NewItem:
    external_id: str
    mime_type: str
    title: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    acl: Acl = Acl()
    payload: bytes | None = None
    payload_path: str | None = None
    byte_size: int = 0
    connector: str | None = None  # the connector that pushed it (None: a plain push)


@dataclass(frozen=True, slots=True)
class ItemRow:
    job_id: uuid.UUID
    item_no: int
    external_id: str
    mime_type: str
    title: str | None
    metadata: Mapping[str, Any]
    acl: Acl
    payload_path: str | None
    byte_size: int
    state: str
    error_code: str | None
    error_message: str | None
    doc_id: int | None
    version: int | None
    chunks: int
    pages: int
    warnings: tuple[str, ...]
    connector: str | None = None


@dataclass(frozen=True, slots=True)
class JobRow:
    job_id: uuid.UUID
    tenant_id: str
    kind: str
    state: str
    params: Mapping[str, Any]
    documents_total: int
    documents_done: int
    documents_failed: int
    documents_unchanged: int
    pages: int
    chunks: int
    bytes: int
    cancel_requested: bool
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime


_JOB_COLUMNS = (
    "job_id, tenant_id, kind, state, coalesce(params, '{}') AS params, documents_total, documents_done,"
    " documents_failed,"
    " documents_unchanged, pages, chunks, bytes, cancel_requested, error, created_at, started_at,"
    " finished_at, updated_at"
)
_ITEM_COLUMNS = (
    "job_id, item_no, external_id, mime_type, title, metadata, acl_principals, acl_public, payload_path,"
    " byte_size, state, error_code, error_message, doc_id, version, chunks, pages, warnings, connector"
)


def _item(
    *,
    metadata: Mapping[str, Any] | None,
    acl_principals: list[str],
    acl_public: bool,
    warnings: list[str],
    **columns: Any,
) -> ItemRow:
    return ItemRow(
        metadata=metadata or {},
        acl=Acl(tuple(acl_principals), acl_public),
        warnings=tuple(warnings),
        **columns,
    )


_JOB_ROW = class_row(JobRow)
_ITEM_ROW = kwargs_row(_item)


def create_job(
    conn: psycopg.Connection,
    *,
    tenant_id: str,
    kind: str,
    items: Sequence[NewItem],
    params: Mapping[str, Any] | None = None,
) -> uuid.UUID:
    job_id = uuid.uuid4()
    conn.execute(
        "INSERT INTO jobs (job_id, tenant_id, kind, params, documents_total) VALUES (%s, %s, %s, %s, %s)",
        (job_id, tenant_id, kind, Jsonb(dict(params or {})), len(items)),
    )
    _copy_items(conn, job_id, items, first=0)
    return job_id


def _copy_items(conn: psycopg.Connection, job_id: uuid.UUID, items: Sequence[NewItem], *, first: int) -> None:
    with (
        conn.cursor() as cur,
        cur.copy(
            "COPY job_items (job_id, item_no, external_id, mime_type, title, metadata, acl_principals,"
            " acl_public, payload, payload_path, byte_size, connector) FROM STDIN"
        ) as copy,
    ):
        for no, it in enumerate(items, start=first):
            copy.write_row(
                (
                    job_id,
                    no,
                    it.external_id,
                    it.mime_type,
                    it.title,
                    Jsonb(dict(it.metadata)),
                    list(it.acl.principals),
                    it.acl.public,
                    it.payload,
                    it.payload_path,
                    it.byte_size,
                    it.connector,
                )
            )


# Serialises a tenant's pushes (two-key advisory lock: this namespace, the tenant's hash), so
# its queue depth is read and its queued job is joined by one push at a time.
_QUEUE_LOCK = 0x72677175


def lock_tenant_queue(conn: psycopg.Connection, *, tenant_id: str) -> None:
    """Hold the tenant's queue lock until the caller's transaction ends."""
    conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_QUEUE_LOCK, tenant_id))


def queued_documents(conn: psycopg.Connection, *, tenant_id: str) -> int:
    """Documents the tenant's queued and running ingest jobs have still to do."""
    row = conn.execute(
        "SELECT coalesce(sum(documents_total - documents_done), 0) FROM jobs"
        " WHERE tenant_id = %s AND kind = 'ingest' AND state IN ('queued', 'running')",
        (tenant_id,),
    ).fetchone()
    return int(row[0]) if row else 0


def joinable_job(
    conn: psycopg.Connection,
    *,
    tenant_id: str,
    pushed_by: str,
    external_ids: Sequence[str],
    max_documents: int,
) -> uuid.UUID | None:
    """The newest queued push job of the tenant and principal ``pushed_by`` that
    ``external_ids`` may join, locked: no runner has claimed it, no cancel was asked, it stays
    within ``max_documents`` and holds none of these ids (one job never writes a document
    twice). Only one principal's pushes share a job, so its errors are that caller's."""
    row = conn.execute(
        "SELECT j.job_id FROM jobs j WHERE j.tenant_id = %(tenant)s AND j.kind = 'ingest'"
        " AND j.state = 'queued' AND NOT j.cancel_requested AND j.params @> '{\"coalesce\": true}'"
        " AND j.params->>'pushed_by' = %(by)s"
        " AND j.documents_total + %(n)s <= %(max)s"
        " AND NOT EXISTS (SELECT 1 FROM job_items i WHERE i.job_id = j.job_id"
        "                 AND i.external_id = ANY(%(ids)s))"
        " ORDER BY j.created_at DESC LIMIT 1 FOR UPDATE OF j SKIP LOCKED",
        {
            "tenant": tenant_id,
            "by": pushed_by,
            "n": len(external_ids),
            "max": max_documents,
            "ids": list(external_ids),
        },
    ).fetchone()
    return row[0] if row else None


def append_items(conn: psycopg.Connection, *, job_id: uuid.UUID, items: Sequence[NewItem]) -> None:
    """Add ``items`` to a queued job the caller holds locked (``joinable_job``)."""
    row = conn.execute(
        "UPDATE jobs SET documents_total = documents_total + %s, updated_at = now()"
        " WHERE job_id = %s AND state = 'queued' RETURNING documents_total - %s",
        (len(items), job_id, len(items)),
    ).fetchone()
    if row is None:
        raise LookupError(f"job {job_id} is no longer queued")
    _copy_items(conn, job_id, items, first=int(row[0]))


def get_job(conn: psycopg.Connection, *, job_id: uuid.UUID, tenant_id: str | None = None) -> JobRow | None:
    sql = f"SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id = %s"
    args: list[Any] = [job_id]
    if tenant_id is not None:
        sql += " AND tenant_id = %s"
        args.append(tenant_id)
    with conn.cursor(row_factory=_JOB_ROW) as cur:
        return cur.execute(sql, args).fetchone()


def list_jobs(
    conn: psycopg.Connection, *, tenant_id: str | None, state: str | None = None, limit: int = 100
) -> list[JobRow]:
    clauses, args = [], []
    if tenant_id is not None:
        clauses.append("tenant_id = %s")
        args.append(tenant_id)
    if state is not None:
        clauses.append("state = %s")
        args.append(state)
    where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
    with conn.cursor(row_factory=_JOB_ROW) as cur:
        return cur.execute(
            f"SELECT {_JOB_COLUMNS} FROM jobs{where} ORDER BY created_at DESC LIMIT %s", [*args, limit]
        ).fetchall()


def items(conn: psycopg.Connection, *, job_id: uuid.UUID, state: str | None = None) -> list[ItemRow]:
    sql = f"SELECT {_ITEM_COLUMNS} FROM job_items WHERE job_id = %s"
    args: list[Any] = [job_id]
    if state is not None:
        sql += " AND state = %s"
        args.append(state)
    with conn.cursor(row_factory=_ITEM_ROW) as cur:
        return cur.execute(sql + " ORDER BY item_no", args).fetchall()


def warned_items(conn: psycopg.Connection, *, job_id: uuid.UUID, limit: int = 1000) -> list[ItemRow]:
    """Items that finished with warnings (mislabelled content, decoding fixes), in item order."""
    with conn.cursor(row_factory=_ITEM_ROW) as cur:
        return cur.execute(
            f"SELECT {_ITEM_COLUMNS} FROM job_items WHERE job_id = %s AND cardinality(warnings) > 0"
            " ORDER BY item_no LIMIT %s",
            (job_id, limit),
        ).fetchall()


def finished_payload_paths(
    conn: psycopg.Connection, *, job_id: uuid.UUID, item_nos: Sequence[int]
) -> list[str]:
    """The staged-file paths of those items that are no longer pending."""
    rows = conn.execute(
        "SELECT payload_path FROM job_items WHERE job_id = %s AND item_no = ANY(%s)"
        " AND state <> 'pending' AND payload_path IS NOT NULL",
        (job_id, list(item_nos)),
    ).fetchall()
    return [r[0] for r in rows]


def live_payload_paths(conn: psycopg.Connection) -> set[str]:
    """Paths a job may still read: pending items of queued or running jobs."""
    rows = conn.execute(
        "SELECT i.payload_path FROM job_items i JOIN jobs j USING (job_id)"
        " WHERE i.state = 'pending' AND i.payload_path IS NOT NULL AND j.state IN ('queued', 'running')"
    ).fetchall()
    return {r[0] for r in rows}


def item_payload(conn: psycopg.Connection, *, job_id: uuid.UUID, item_no: int) -> bytes | None:
    row = conn.execute(
        "SELECT payload FROM job_items WHERE job_id = %s AND item_no = %s", (job_id, item_no)
    ).fetchone()
    return bytes(row[0]) if row and row[0] is not None else None


def unstaged_path_items(conn: psycopg.Connection, *, job_id: uuid.UUID) -> list[tuple[int, str]]:
    """Pending items whose bytes are still only a path on the submitting machine's disk."""
    rows = conn.execute(
        "SELECT item_no, payload_path FROM job_items WHERE job_id = %s AND state = 'pending'"
        " AND payload IS NULL AND payload_path IS NOT NULL ORDER BY item_no",
        (job_id,),
    ).fetchall()
    return [(int(no), str(path)) for no, path in rows]


def stage_payload(conn: psycopg.Connection, *, job_id: uuid.UUID, item_no: int, payload: bytes) -> None:
    """Keep a pending item's bytes in the catalog, where every cluster node can read them."""
    conn.execute(
        "UPDATE job_items SET payload = %s WHERE job_id = %s AND item_no = %s AND state = 'pending'",
        (payload, job_id, item_no),
    )


def record_placement(conn: psycopg.Connection, *, job_id: uuid.UUID, placement: Mapping[str, Any]) -> None:
    """Which Ray nodes ran each stage of a job (kept in the job's params)."""
    conn.execute(
        "UPDATE jobs SET params = params || %s, updated_at = now() WHERE job_id = %s",
        (Jsonb({"placement": dict(placement)}), job_id),
    )


def item_is_pending(conn: psycopg.Connection, *, job_id: uuid.UUID, item_no: int) -> bool:
    """Lock the item row and say whether it still waits for its outcome."""
    row = conn.execute(
        "SELECT state FROM job_items WHERE job_id = %s AND item_no = %s FOR UPDATE", (job_id, item_no)
    ).fetchone()
    return bool(row and row[0] == "pending")


def claim_job(
    conn: psycopg.Connection, *, job_id: uuid.UUID, owner: str, lease_seconds: float, force: bool = False
) -> bool:
    """Mark a queued (or orphaned running) job as ours; False if another worker holds it.

    A running job is orphaned when its heartbeat is older than ``lease_seconds``; ``force`` (an
    operator's ``ragline jobs resume``) takes it over at once. Items stay exactly-once either
    way: each commit re-checks, under a row lock, that its item is still pending.
    """
    cur = conn.execute(
        "UPDATE jobs SET state = 'running', owner = %s, heartbeat_at = now(),"
        " started_at = coalesce(started_at, now()), updated_at = now()"
        " WHERE job_id = %s AND (state = 'queued' OR (state = 'running' AND (owner = %s OR %s OR"
        " heartbeat_at < now() - make_interval(secs => %s))))",
        (owner, job_id, owner, force, lease_seconds),
    )
    return cur.rowcount == 1


# Serialises claims across processes and replicas: "the tenant has no running job" and the
# claim that makes one running must be one step, or two replicas could each start one.
_CLAIM_LOCK = 0x7267636C61696D


def claim_next(
    conn: psycopg.Connection,
    *,
    owner: str,
    lease_seconds: float,
    kind: str = "ingest",
    exclude: Sequence[uuid.UUID] = (),
) -> uuid.UUID | None:
    """Claim the next job to run fairly: at most one running job per tenant.

    The oldest queued job (or orphaned running job, its lease expired) of a tenant that has
    no live running job becomes ours, so one tenant's huge job only delays that tenant.
    Cancel-requested orphans come first: settling them is instant and unblocks their tenant.
    ``exclude``: jobs the caller's process is running (a slow batch is not an orphan to it).
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_CLAIM_LOCK,))
        row = conn.execute(
            "SELECT j.job_id FROM jobs j WHERE j.kind = %(kind)s AND (j.state = 'queued'"
            "  OR (j.state = 'running' AND j.heartbeat_at < now() - make_interval(secs => %(lease)s)))"
            " AND NOT EXISTS (SELECT 1 FROM jobs r WHERE r.kind = j.kind AND r.tenant_id = j.tenant_id"
            "  AND r.job_id <> j.job_id AND r.state = 'running'"
            "  AND (r.heartbeat_at >= now() - make_interval(secs => %(lease)s)"
            "       OR r.job_id = ANY(%(exclude)s::uuid[])))"
            " AND NOT (j.job_id = ANY(%(exclude)s::uuid[]))"
            " ORDER BY j.cancel_requested DESC, j.created_at LIMIT 1 FOR UPDATE OF j SKIP LOCKED",
            {"kind": kind, "lease": lease_seconds, "exclude": list(exclude)},
        ).fetchone()
        if row is None:
            return None
        conn.execute(
            "UPDATE jobs SET state = 'running', owner = %s, heartbeat_at = now(),"
            " started_at = coalesce(started_at, now()), updated_at = now() WHERE job_id = %s",
            (owner, row[0]),
        )
        job_id: uuid.UUID = row[0]
        return job_id


Lease = Literal["held", "cancel", "lost"]


def renew_lease(conn: psycopg.Connection, *, job_id: uuid.UUID, owner: str) -> Lease:
    """Refresh our lease on a running job and say whether to go on.

    ``cancel``: a cancel was requested; ``lost``: the job is no longer ours (an operator's
    ``jobs resume --force`` or a takeover after our lease ran out), so we must stop without
    settling it.
    """
    row = conn.execute(
        "UPDATE jobs SET heartbeat_at = now() WHERE job_id = %s AND owner = %s AND state = 'running'"
        " RETURNING cancel_requested",
        (job_id, owner),
    ).fetchone()
    if row is None:
        return "lost"
    return "cancel" if row[0] else "held"


def lease_owner(conn: psycopg.Connection, *, job_id: uuid.UUID) -> str | None:
    """Who holds (or last held) the job's lease: a runner's id, ``host:pid:suffix``."""
    row = conn.execute("SELECT owner FROM jobs WHERE job_id = %s", (job_id,)).fetchone()
    return str(row[0]) if row and row[0] is not None else None


def finish_item(
    conn: psycopg.Connection,
    *,
    job_id: uuid.UUID,
    item_no: int,
    state: str,
    error_code: str | None = None,
    error_message: str | None = None,
    doc_id: int | None = None,
    version: int | None = None,
    chunks: int = 0,
    pages: int = 0,
    warnings: Sequence[str] = (),
) -> bool:
    """Record an item's outcome and bump the job counters; False if it was already finished.

    Run it in the same transaction as the document commit: that is what makes a resumed job
    write every document exactly once.
    """
    row = conn.execute(
        "UPDATE job_items SET state = %s, error_code = %s, error_message = %s, doc_id = %s, version = %s,"
        " chunks = %s, pages = %s, warnings = %s, finished_at = now(), payload = NULL"
        " WHERE job_id = %s AND item_no = %s AND state = 'pending' RETURNING byte_size",
        (state, error_code, error_message, doc_id, version, chunks, pages, list(warnings), job_id, item_no),
    ).fetchone()
    if row is None:
        return False
    conn.execute(
        "UPDATE jobs SET documents_done = documents_done + 1,"
        " documents_failed = documents_failed + %s, documents_unchanged = documents_unchanged + %s,"
        " pages = pages + %s, chunks = chunks + %s, bytes = bytes + %s, updated_at = now()"
        " WHERE job_id = %s",
        (int(state == "failed"), int(state == "unchanged"), pages, chunks, row[0], job_id),
    )
    return True


def finish_job(conn: psycopg.Connection, *, job_id: uuid.UUID, error: str | None = None) -> str:
    """Settle the final state from the item outcomes; returns it."""
    row = conn.execute(
        "SELECT cancel_requested, documents_total, documents_failed,"
        " (SELECT count(*) FROM job_items WHERE job_id = %s AND state = 'pending')"
        " FROM jobs WHERE job_id = %s",
        (job_id, job_id),
    ).fetchone()
    if row is None:
        raise LookupError(f"job {job_id} not found")
    cancelled, total, failed, pending = row
    # A cancel that came after the last item was written cancelled nothing: say what happened.
    if cancelled and pending > 0:
        # Cancelled items keep their payload: ``reopen_job`` (resume) can still run them.
        conn.execute(
            "UPDATE job_items SET state = 'cancelled' WHERE job_id = %s AND state = 'pending'", (job_id,)
        )
        state = "cancelled"
    elif error is not None or (total > 0 and failed == total):
        state = "failed"
    elif failed > 0 or pending > 0:
        state = "partially_failed"
    else:
        state = "succeeded"
    conn.execute(
        "UPDATE jobs SET state = %s, error = %s, finished_at = now(), updated_at = now() WHERE job_id = %s",
        (state, error, job_id),
    )
    return state


def request_cancel(conn: psycopg.Connection, *, job_id: uuid.UUID, tenant_id: str | None) -> JobRow | None:
    """Ask a job to stop (a queued one is cancelled at once); None when no such job is visible.

    ``tenant_id`` None is the operator's view (every tenant), as in ``ragline jobs cancel``.
    """
    conn.execute(
        "UPDATE jobs SET cancel_requested = true, updated_at = now()"
        " WHERE job_id = %s AND (%s::text IS NULL OR tenant_id = %s)",
        (job_id, tenant_id, tenant_id),
    )
    conn.execute(
        "UPDATE jobs SET state = 'cancelled', finished_at = now() WHERE job_id = %s AND state = 'queued'",
        (job_id,),
    )
    return get_job(conn, job_id=job_id, tenant_id=tenant_id)


def count_by_state(conn: psycopg.Connection) -> dict[tuple[str, str], int]:
    """How many jobs there are per (kind, state)."""
    rows = conn.execute("SELECT kind, state, count(*) FROM jobs GROUP BY kind, state").fetchall()
    return {(r[0], r[1]): int(r[2]) for r in rows}


def succeeded_item_times(conn: psycopg.Connection) -> dict[str, datetime]:
    """When each external id's item last succeeded, over every job of every tenant."""
    rows = conn.execute(
        "SELECT external_id, finished_at FROM job_items WHERE state = 'succeeded' ORDER BY finished_at"
    ).fetchall()
    return {r[0]: r[1] for r in rows}


def item_failures(conn: psycopg.Connection, *, job_id: uuid.UUID) -> dict[str, int]:
    """A job's failed items per error code."""
    rows = conn.execute(
        "SELECT coalesce(error_code, 'unknown'), count(*) FROM job_items"
        " WHERE job_id = %s AND state = 'failed' GROUP BY 1",
        (job_id,),
    ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def reopen_job(conn: psycopg.Connection, *, job_id: uuid.UUID, tenant_id: str | None) -> JobRow | None:
    """Queue a finished job again for its items that never ran (pending or cancelled).

    Failed items keep their outcome; counters stay right because cancelled items were never
    counted. None when the job is not visible, still queued or running, or has nothing left.
    """
    row = conn.execute(
        "UPDATE jobs SET state = 'queued', cancel_requested = false, error = NULL, finished_at = NULL,"
        " updated_at = now() WHERE job_id = %s AND (%s::text IS NULL OR tenant_id = %s)"
        " AND state IN ('cancelled', 'failed', 'partially_failed')"
        " AND EXISTS (SELECT 1 FROM job_items i WHERE i.job_id = jobs.job_id"
        "             AND i.state IN ('pending', 'cancelled'))"
        " RETURNING job_id",
        (job_id, tenant_id, tenant_id),
    ).fetchone()
    if row is None:
        return None
    conn.execute(
        "UPDATE job_items SET state = 'pending', finished_at = NULL"
        " WHERE job_id = %s AND state = 'cancelled'",
        (job_id,),
    )
    return get_job(conn, job_id=job_id, tenant_id=tenant_id)


def set_progress(
    conn: psycopg.Connection, *, job_id: uuid.UUID, total: int, done: int, add_chunks: int = 0
) -> bool:
    """A migration's progress (chunks as the unit) and its lease; returns whether a cancel was asked."""
    row = conn.execute(
        "UPDATE jobs SET documents_total = %s, documents_done = %s, chunks = chunks + %s,"
        " heartbeat_at = now(), updated_at = now() WHERE job_id = %s RETURNING cancel_requested",
        (total, done, add_chunks, job_id),
    ).fetchone()
    return bool(row and row[0])


def set_report(conn: psycopg.Connection, *, job_id: uuid.UUID, report: Mapping[str, Any]) -> None:
    """Put a job's report (a migration's gate results) under ``params.report``."""
    conn.execute(
        "UPDATE jobs SET params = coalesce(params, '{}') || jsonb_build_object('report', %s::jsonb),"
        " updated_at = now() WHERE job_id = %s",
        (Jsonb(dict(report)), job_id),
    )


def end_job(conn: psycopg.Connection, *, job_id: uuid.UUID, state: str, error: str | None = None) -> None:
    """Settle a job without items (a migration) in ``state``."""
    conn.execute(
        "UPDATE jobs SET state = %s, error = %s, finished_at = now(), updated_at = now() WHERE job_id = %s",
        (state, error, job_id),
    )

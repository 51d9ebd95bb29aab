"""Erasure records and the job items they cover (``ragline purge``).

A document's content lives in more places than its document rows: every job item that
carried it holds its payload (or a staged upload's path), title and metadata until the item
ends, and a cancelled or failed push has no document id at all. An erasure scrubs every item
of the (tenant, external id) in any state and settles those that never ran as ``erased``, so
no resume or retry runs them; the record it leaves (``erasures``) is checked again by the
write path, under a lock the purge takes exclusively, so an item the purge could not see (a
push committing while it ran) is settled ``erased`` instead of writing the document back.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import psycopg

# Two-key advisory lock (this namespace, the hash of tenant/external id): the purge holds it
# exclusively, each commit of an item of that id shares it, so a commit either ends before
# the purge starts (and the purge erases what it wrote) or sees its erasure.
_ERASURE_LOCK = 0x72676572

# Everything of an item that may hold the document's content or name it.
_SCRUB = "payload = NULL, title = NULL, metadata = '{}'::jsonb, warnings = '{}', error_message = NULL"
_HOLDS_CONTENT = (
    "(i.payload IS NOT NULL OR i.payload_path IS NOT NULL OR i.title IS NOT NULL"
    " OR i.metadata <> '{}'::jsonb OR cardinality(i.warnings) > 0 OR i.error_message IS NOT NULL"
    " OR i.state IN ('pending', 'cancelled'))"
)


@dataclass(frozen=True, slots=True)
class ErasedItems:
    items: int  # job items scrubbed (those that never ran are settled 'erased')
    staged_paths: tuple[str, ...]  # their payload files (only staged uploads may be removed)


def lock(conn: psycopg.Connection, *, tenant_id: str, external_id: str) -> None:
    """Hold the id's erasure lock exclusively until the transaction ends (the purge)."""
    conn.execute(
        "SELECT pg_advisory_xact_lock(%s, hashtext(%s::text || '/' || %s::text))",
        (_ERASURE_LOCK, tenant_id, external_id),
    )


def record_erasure(conn: psycopg.Connection, *, tenant_id: str, external_id: str) -> None:
    """Record that the id was erased now (a later erasure moves the time on)."""
    conn.execute(
        "INSERT INTO erasures (tenant_id, external_id, erased_at) VALUES (%s, %s, now())"
        " ON CONFLICT (tenant_id, external_id) DO UPDATE SET erased_at = EXCLUDED.erased_at",
        (tenant_id, external_id),
    )


def known(conn: psycopg.Connection, *, tenant_id: str, external_id: str) -> bool:
    """Whether any job item of the id or an earlier erasure of it exists."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM job_items i JOIN jobs j USING (job_id)"
        "               WHERE j.tenant_id = %(t)s AND i.external_id = %(e)s)"
        " OR EXISTS (SELECT 1 FROM erasures WHERE tenant_id = %(t)s AND external_id = %(e)s)",
        {"t": tenant_id, "e": external_id},
    ).fetchone()
    return bool(row and row[0])


def erase_items(conn: psycopg.Connection, *, tenant_id: str, external_id: str) -> ErasedItems:
    """Scrub every job item of the id, in any state and any job of the tenant: items that
    never ran (pending, cancelled) become ``erased`` and count as done for their job."""
    rows = conn.execute(
        "WITH hit AS ("
        "  SELECT i.job_id, i.item_no, i.state, i.payload_path FROM job_items i JOIN jobs j USING (job_id)"
        f"  WHERE j.tenant_id = %s AND i.external_id = %s AND {_HOLDS_CONTENT} FOR UPDATE OF i"
        "), scrubbed AS ("
        "  UPDATE job_items i SET payload_path = NULL, " + _SCRUB + ","
        "    state = CASE WHEN hit.state IN ('pending', 'cancelled') THEN 'erased' ELSE i.state END,"
        "    finished_at = CASE WHEN hit.state IN ('pending', 'cancelled') THEN now() ELSE i.finished_at END"
        "  FROM hit WHERE i.job_id = hit.job_id AND i.item_no = hit.item_no"
        "  RETURNING i.job_id, hit.state AS was, hit.payload_path"
        "), counted AS ("
        "  UPDATE jobs SET documents_done = documents_done + n.k, updated_at = now()"
        "  FROM (SELECT job_id, count(*) AS k FROM scrubbed WHERE was IN ('pending', 'cancelled')"
        "        GROUP BY job_id) n WHERE jobs.job_id = n.job_id"
        ") SELECT payload_path FROM scrubbed",
        (tenant_id, external_id),
    ).fetchall()
    return ErasedItems(len(rows), tuple(str(r[0]) for r in rows if r[0] is not None))


def erased_since_queued(conn: psycopg.Connection, *, job_id: uuid.UUID, item_no: int) -> bool:
    """Share the item's erasure lock (until the transaction ends) and say whether its id was
    erased after the item was queued: then it must never be written."""
    conn.execute(
        "SELECT pg_advisory_xact_lock_shared(%s, hashtext(j.tenant_id || '/' || i.external_id))"
        " FROM job_items i JOIN jobs j USING (job_id) WHERE i.job_id = %s AND i.item_no = %s",
        (_ERASURE_LOCK, job_id, item_no),
    )
    # A statement of its own: its snapshot is taken after the lock was granted.
    row = conn.execute(
        "SELECT 1 FROM job_items i JOIN jobs j USING (job_id) JOIN erasures e"
        " ON e.tenant_id = j.tenant_id AND e.external_id = i.external_id"
        " WHERE i.job_id = %s AND i.item_no = %s AND i.queued_at <= e.erased_at",
        (job_id, item_no),
    ).fetchone()
    return row is not None


def erased_since_item(
    conn: psycopg.Connection, *, tenant_id: str, external_id: str, job_id: uuid.UUID, item_no: int
) -> bool:
    """Share the erasure lock of ``external_id`` (an attachment made from the item's bytes)
    and say whether it was erased after the item was queued: then it must not be written."""
    conn.execute(
        "SELECT pg_advisory_xact_lock_shared(%s, hashtext(%s::text || '/' || %s::text))",
        (_ERASURE_LOCK, tenant_id, external_id),
    )
    row = conn.execute(
        "SELECT 1 FROM erasures e JOIN job_items i ON i.job_id = %s AND i.item_no = %s"
        " WHERE e.tenant_id = %s AND e.external_id = %s AND i.queued_at <= e.erased_at",
        (job_id, item_no, tenant_id, external_id),
    ).fetchone()
    return row is not None


def settle_item(conn: psycopg.Connection, *, job_id: uuid.UUID, item_no: int) -> bool:
    """Settle one pending item ``erased`` (scrubbed, counted done); False if it was not
    pending. Its ``payload_path`` stays: the commit batch removes a staged upload through it
    once the transaction is done (``jobs.staging.remove_finished``)."""
    return bool(_settle(conn, job_id, "AND i.item_no = %s", (item_no,), keep_path=True))


def settle_queued(conn: psycopg.Connection, *, job_id: uuid.UUID) -> list[str]:
    """Settle ``erased`` every pending item of the job whose id was erased after it was
    queued (a resume or retry never runs it); returns their payload paths."""
    paths = _settle(
        conn,
        job_id,
        "AND EXISTS (SELECT 1 FROM erasures e WHERE e.tenant_id = j.tenant_id"
        " AND e.external_id = i.external_id AND i.queued_at <= e.erased_at)",
        (),
    )
    return [p for p in paths if p is not None]


def _settle(
    conn: psycopg.Connection,
    job_id: uuid.UUID,
    where: str,
    args: tuple[object, ...],
    *,
    keep_path: bool = False,
) -> list[str | None]:
    path = "" if keep_path else "payload_path = NULL, "
    rows = conn.execute(
        "WITH hit AS ("
        "  SELECT i.item_no, i.payload_path FROM job_items i JOIN jobs j USING (job_id)"
        f"  WHERE i.job_id = %s AND i.state = 'pending' {where} FOR UPDATE OF i"
        "), scrubbed AS ("
        "  UPDATE job_items i SET state = 'erased', finished_at = now(), "
        + path
        + _SCRUB
        + "  FROM hit WHERE i.job_id = %s AND i.item_no = hit.item_no RETURNING hit.payload_path"
        "), counted AS ("
        "  UPDATE jobs SET documents_done = documents_done + (SELECT count(*) FROM scrubbed),"
        "  updated_at = now() WHERE job_id = %s AND EXISTS (SELECT 1 FROM scrubbed)"
        ") SELECT payload_path FROM scrubbed",
        (job_id, *args, job_id, job_id),
    ).fetchall()
    return [None if r[0] is None else str(r[0]) for r in rows]

"""Job operations shared by the API, the console and the CLI: each one takes the caller's
connection, does its catalog writes and appends its audit entry in one transaction, so a
push, a cancel or a resume is recorded the same way whichever path asked for it.

Pushes queue with back-pressure: a caller's small pushes join its queued push job in the
tenant (one job runs them in batches instead of one job each, since a tenant runs one job at
a time; another principal's pushes never share it, so a job's errors are its caller's), and
a push that would take the tenant's queue past ``max_queued_documents`` is refused with
:class:`~core.errors.QueueFullError` (429 with ``Retry-After``) rather than queued behind it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from catalog import audit
from catalog import jobs as jobs_repo
from catalog import principals as principals_repo
from core import metrics
from core.errors import QueueFullError


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """How pushes queue: ``coalesce_max_documents`` caps a joined job (0: every push is its
    own job); past ``max_queued_documents`` pending in the tenant's jobs a push is refused
    (0: never) and told to retry after ``retry_after_s``."""

    coalesce_max_documents: int = 0
    max_queued_documents: int = 0
    retry_after_s: int = 5


# The CLI's bulk ingest and tests: no coalescing, no limit.
UNBOUNDED = QueuePolicy()


@dataclass(frozen=True, slots=True)
class Queued:
    job_id: uuid.UUID
    coalesced: bool  # joined a queued job other pushes made (its counts include theirs)


def queue_ingest(
    conn: psycopg.Connection,
    *,
    tenant_id: str,
    actor: str,
    via: str,
    items: Sequence[jobs_repo.NewItem],
    policy: QueuePolicy = UNBOUNDED,
    params: Mapping[str, Any] | None = None,
) -> Queued:
    """Queue ``items`` for the tenant and audit ``ingest.push``; commits on return.

    Raises:
        QueueFullError: the tenant's queue holds ``policy.max_queued_documents`` already.
    """
    with conn.transaction():
        principals_repo.ensure_tenant(conn, tenant_id=tenant_id)
        jobs_repo.lock_tenant_queue(conn, tenant_id=tenant_id)
        if policy.max_queued_documents:
            pending = jobs_repo.queued_documents(conn, tenant_id=tenant_id)
            if pending and pending + len(items) > policy.max_queued_documents:
                metrics.RATE_LIMITED.labels("ingest_queue").inc()
                raise QueueFullError(
                    f"this tenant has {pending} documents queued (limit {policy.max_queued_documents});"
                    f" retry after {policy.retry_after_s} s",
                    retry_after_s=policy.retry_after_s,
                )
        joined = None
        if policy.coalesce_max_documents and len(items) < policy.coalesce_max_documents:
            joined = jobs_repo.joinable_job(
                conn,
                tenant_id=tenant_id,
                pushed_by=actor,
                external_ids=[i.external_id for i in items],
                max_documents=policy.coalesce_max_documents,
            )
        if joined is not None:
            jobs_repo.append_items(conn, job_id=joined, items=items)
            job_id = joined
        else:
            job_params = {
                **(params or {}),
                "coalesce": bool(policy.coalesce_max_documents),
                "pushed_by": actor,
            }
            job_id = jobs_repo.create_job(
                conn, tenant_id=tenant_id, kind="ingest", items=items, params=job_params
            )
        audit.record(
            conn,
            actor=actor,
            action="ingest.push",
            tenant_id=tenant_id,
            target=str(job_id),
            details={"documents": len(items), "coalesced": joined is not None, "via": via},
        )
    return Queued(job_id, joined is not None)


def cancel(
    conn: psycopg.Connection, *, job_id: uuid.UUID, tenant_id: str | None, actor: str, via: str
) -> jobs_repo.JobRow | None:
    """Ask a job to stop and audit ``job.cancel``; None when no such job is visible.

    ``tenant_id`` None is the operator's view (every tenant), as in ``ragline jobs cancel``."""
    with conn.transaction():
        job = jobs_repo.request_cancel(conn, job_id=job_id, tenant_id=tenant_id)
        if job is not None:
            _record(conn, "job.cancel", job, actor=actor, via=via)
    return job


def reopen(
    conn: psycopg.Connection, *, job_id: uuid.UUID, tenant_id: str | None, actor: str, via: str
) -> jobs_repo.JobRow | None:
    """Queue a finished job again for its items that never ran and audit ``job.resume``;
    None when it is not visible, not finished or has nothing left (``reopen_job``)."""
    with conn.transaction():
        job = jobs_repo.reopen_job(conn, job_id=job_id, tenant_id=tenant_id)
        if job is not None:
            _record(conn, "job.resume", job, actor=actor, via=via)
    return job


def record_resume(conn: psycopg.Connection, job: jobs_repo.JobRow, *, actor: str, via: str) -> None:
    """Audit ``job.resume`` for a job resumed in place (``ragline jobs resume`` runs it here)."""
    with conn.transaction():
        _record(conn, "job.resume", job, actor=actor, via=via)


def _record(conn: psycopg.Connection, action: str, job: jobs_repo.JobRow, *, actor: str, via: str) -> None:
    audit.record(
        conn,
        actor=actor,
        action=action,
        tenant_id=job.tenant_id,
        target=str(job.job_id),
        details={"kind": job.kind, "state": job.state, "via": via},
    )

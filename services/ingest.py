"""Documents in and out: push, upload, ingest a path, delete, set an ACL.

Every way documents enter the catalog (``POST /v1/documents``, ``POST /v1/documents:upload``,
a connector's pushes, ``ragline ingest``) creates its job here, in :func:`queue_ingest`:
the tenant is made, the job created or joined, ``ingest.push`` audited, all in one
transaction, and only after its commit is the runner told. The adapters parse and render;
whichever path asked, the job and its audit entry look the same.

Pushes queue with back-pressure: a caller's small pushes join its queued push job in the
tenant (one job runs them in batches instead of one job each, since a tenant runs one job at
a time; another principal's pushes never share it, so a job's errors are its caller's), and
a push that would take the tenant's queue past ``max_queued_documents`` is refused with
:class:`~core.errors.QueueFullError` (429 with ``Retry-After``) rather than queued behind it.

A connector (``connector`` set) owns what it pushes: items another connector wrote are
refused one by one (:class:`Refusal`), and it may delete or re-ACL only its own documents.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from catalog import attachments as attachments_repo
from catalog import audit
from catalog import documents as docs_repo
from catalog import jobs as jobs_repo
from catalog import principals as principals_repo
from catalog.jobs import NewItem
from core import metrics, tracing
from core.errors import QueueFullError
from core.records import Acl
from services.caller import Caller, JobSubmitter

__all__ = [
    "UNBOUNDED",
    "NewItem",
    "Pushed",
    "Queued",
    "QueuePolicy",
    "Refusal",
    "delete_document",
    "ingest_path",
    "push",
    "queue_ingest",
    "set_acl",
    "upload",
]


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


@dataclass(frozen=True, slots=True)
class Refusal:
    """An item a connector may not write: another connector owns the document."""

    external_id: str
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Pushed:
    """What a push did: the job its accepted items went into (None when every item was
    refused: then no job was made) and the items refused, by external id."""

    job_id: uuid.UUID | None
    accepted: Sequence[NewItem]
    refused: Mapping[str, Refusal]


def queue_ingest(
    conn: psycopg.Connection,
    *,
    tenant_id: str,
    caller: Caller,
    items: Sequence[NewItem],
    policy: QueuePolicy = UNBOUNDED,
    params: Mapping[str, Any] | None = None,
) -> Queued:
    """Queue ``items`` for the tenant and audit ``ingest.push``, in one transaction.

    The one place an ingest job is created for a tenant. Commits on return when ``conn``
    was idle; inside the caller's transaction it is a savepoint of it.

    Raises:
        QueueFullError: the tenant's queue holds ``policy.max_queued_documents`` already.
    """
    with conn.transaction():
        principals_repo.ensure_tenant(conn, tenant_id=tenant_id)
        jobs_repo.lock_tenant_queue(conn, tenant_id=tenant_id)
        _check_depth(conn, tenant_id, len(items), policy)
        joined = _joinable(conn, tenant_id, caller.actor, items, policy)
        if joined is not None:
            jobs_repo.append_items(conn, job_id=joined, items=items)
            job_id = joined
        else:
            job_params = {
                **(params or {}),
                "coalesce": bool(policy.coalesce_max_documents),
                "pushed_by": caller.actor,
            }
            if carried := tracing.carrier():  # the job's spans continue the pushing request's trace
                job_params["trace"] = carried
            job_id = jobs_repo.create_job(
                conn, tenant_id=tenant_id, kind="ingest", items=items, params=job_params
            )
        audit.record(
            conn,
            actor=caller.actor,
            action="ingest.push",
            tenant_id=tenant_id,
            target=str(job_id),
            details={"documents": len(items), "coalesced": joined is not None, "via": caller.via},
        )
    return Queued(job_id, joined is not None)


def _check_depth(conn: psycopg.Connection, tenant_id: str, adding: int, policy: QueuePolicy) -> None:
    if not policy.max_queued_documents:
        return
    pending = jobs_repo.queued_documents(conn, tenant_id=tenant_id)
    if pending and pending + adding > policy.max_queued_documents:
        metrics.RATE_LIMITED.labels("ingest_queue").inc()
        raise QueueFullError(
            f"this tenant has {pending} documents queued (limit {policy.max_queued_documents});"
            f" retry after {policy.retry_after_s} s",
            retry_after_s=policy.retry_after_s,
        )


def _joinable(
    conn: psycopg.Connection, tenant_id: str, actor: str, items: Sequence[NewItem], policy: QueuePolicy
) -> uuid.UUID | None:
    """The caller's queued push job these items may join, if the policy coalesces."""
    if not policy.coalesce_max_documents or len(items) >= policy.coalesce_max_documents:
        return None
    return jobs_repo.joinable_job(
        conn,
        tenant_id=tenant_id,
        pushed_by=actor,
        external_ids=[i.external_id for i in items],
        max_documents=policy.coalesce_max_documents,
    )


def push(
    conn: psycopg.Connection,
    *,
    caller: Caller,
    tenant_id: str,
    items: Sequence[NewItem],
    connector: str | None = None,
    policy: QueuePolicy = UNBOUNDED,
    runner: JobSubmitter | None = None,
) -> Pushed:
    """Queue validated ``items`` as one job (``POST /v1/documents``) and tell ``runner``.

    With ``connector``, the items become its own, and those another connector owns are
    refused (the job checks again under the row lock); when every item is refused no job
    is made. ``runner`` is told after the commit; None: a runner elsewhere polls the queue.

    Raises:
        QueueFullError: the tenant's queue is full (see :class:`QueuePolicy`).
    """
    if connector is not None:
        items = [dataclasses.replace(i, connector=connector) for i in items]
    with conn.transaction():
        refused = _refuse_foreign(conn, tenant_id, connector, items)
        accepted = [i for i in items if i.external_id not in refused]
        if not accepted:
            return Pushed(None, [], refused)
        job_id = queue_ingest(conn, tenant_id=tenant_id, caller=caller, items=accepted, policy=policy).job_id
    if runner is not None:
        runner.submit(job_id)
    return Pushed(job_id, accepted, refused)


def upload(
    conn: psycopg.Connection,
    *,
    caller: Caller,
    tenant_id: str,
    item: NewItem,
    connector: str | None = None,
    policy: QueuePolicy = UNBOUNDED,
    runner: JobSubmitter | None = None,
) -> Pushed:
    """Queue one staged file (``item.payload_path``) as a push (``POST /v1/documents:upload``).

    A refused upload's staged file is removed here: no job will ever read it."""
    pushed = push(
        conn,
        caller=caller,
        tenant_id=tenant_id,
        items=[item],
        connector=connector,
        policy=policy,
        runner=runner,
    )
    if pushed.job_id is None and item.payload_path is not None:
        Path(item.payload_path).unlink(missing_ok=True)
    return pushed


def _refuse_foreign(
    conn: psycopg.Connection, tenant_id: str, connector: str | None, items: Sequence[NewItem]
) -> dict[str, Refusal]:
    if connector is None or not items:
        return {}
    foreign = docs_repo.foreign_documents(
        conn, tenant_id=tenant_id, external_ids=[i.external_id for i in items], connector=connector
    )
    return {
        ext: Refusal(ext, docs_repo.FOREIGN_CODE, docs_repo.foreign_message(ext, owner))
        for ext, owner in foreign.items()
    }


def ingest_path(
    conn: psycopg.Connection,
    *,
    caller: Caller,
    tenant_id: str,
    items: Sequence[NewItem],
    paths: Sequence[Path],
) -> uuid.UUID:
    """Queue the files found under ``paths`` as one job (``ragline ingest``), audited as any
    push is; the job records the paths it came from. No coalescing and no queue limit: the
    caller runs the job itself, in process, once this returns."""
    return queue_ingest(
        conn, tenant_id=tenant_id, caller=caller, items=items, params={"paths": [str(p) for p in paths]}
    ).job_id


def delete_document(
    conn: psycopg.Connection,
    *,
    caller: Caller,
    tenant_id: str,
    external_id: str,
    connector: str | None = None,
) -> int:
    """Tombstone every chunk of the document (an e-mail's: its attachments' too) and audit
    ``document.delete``; returns how many.

    Raises:
        NotFoundError: no such document in the tenant.
        ConflictError: ``connector`` is given and did not write the document.
    """
    with conn.transaction():
        hidden = docs_repo.delete_document(
            conn, tenant_id=tenant_id, external_id=external_id, connector=connector
        )
        hidden += _delete_attachments(conn, tenant_id=tenant_id, external_id=external_id)
        audit.record(
            conn,
            actor=caller.actor,
            action="document.delete",
            tenant_id=tenant_id,
            target=external_id,
            details={"chunks": hidden, "via": caller.via},
        )
    return hidden


def _delete_attachments(conn: psycopg.Connection, *, tenant_id: str, external_id: str) -> int:
    """The deleted message's attachments go with it (its lock is held: none is added meanwhile)."""
    doc = docs_repo.get_document(conn, tenant_id=tenant_id, external_id=external_id)
    if doc is None:
        return 0
    return attachments_repo.delete_children(conn, tenant_id=tenant_id, parent_doc_id=doc.doc_id)


def set_acl(
    conn: psycopg.Connection,
    *,
    caller: Caller,
    tenant_id: str,
    external_id: str,
    acl: Acl,
    connector: str | None = None,
) -> Acl:
    """Replace the document's ACL (an e-mail's: its attachments' too) and audit
    ``document.acl``; effective for retrieval from the commit on. Returns the ACL set.

    Raises:
        NotFoundError: no such document in the tenant.
        ConflictError: ``connector`` is given and did not write the document.
    """
    with conn.transaction():
        doc = docs_repo.set_acl(
            conn, tenant_id=tenant_id, external_id=external_id, acl=acl, connector=connector
        )
        # An e-mail's attachments have its readers: in the same transaction, so no search
        # sees the message's new ACL beside an attachment's old one.
        attachments_repo.propagate_acl(conn, tenant_id=tenant_id, parent_doc_id=doc.doc_id, acl=acl)
        audit.record(
            conn,
            actor=caller.actor,
            action="document.acl",
            tenant_id=tenant_id,
            target=external_id,
            details={"principals": list(acl.principals), "public": acl.public, "via": caller.via},
        )
    return acl

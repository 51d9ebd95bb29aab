"""Following and steering jobs: get, list, cancel, resume.

``tenant_id`` None is the operator's view (every tenant), as ``ragline jobs`` sees the
catalog; the API passes the key's tenant, so a job of another tenant is "no such job".
A cancel or a resume is audited (``job.cancel``, ``job.resume``) in the transaction that
does it, whichever path asked: ``POST /v1/jobs/{id}:cancel`` and ``ragline jobs cancel`` are
one function, :func:`cancel`.

Two resumes exist because they run the job in different places: :func:`resume` queues it
again for a server's runner (``POST /v1/jobs/{id}:resume``); :func:`resume_here` runs it in
this process (``ragline jobs resume``), taking over a job whose worker died as well.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import psycopg

from catalog import audit
from catalog import jobs as jobs_repo
from catalog.jobs import TERMINAL, ItemRow, JobRow
from core.errors import ConflictError, NotFoundError, UnavailableError
from services.caller import Caller, JobSubmitter

__all__ = [
    "TERMINAL",
    "ItemRow",
    "JobDetail",
    "JobRow",
    "cancel",
    "find_job",
    "get_job",
    "job_unit",
    "list_jobs",
    "progress_line",
    "resumable",
    "resume",
    "resume_here",
]


@dataclass(frozen=True, slots=True)
class JobDetail:
    """A job with its failed items and the items that finished with warnings."""

    job: JobRow
    failed: list[ItemRow]
    warned: list[ItemRow]


def job_unit(kind: str) -> Literal["documents", "chunks"]:
    """What a job's counts count: a model migration (``reembed``) chunks, any other job documents."""
    return "chunks" if kind == "reembed" else "documents"


def progress_line(*, kind: str, state: str, total: int, done: int, failed: int) -> str:
    """A job's progress in words, the one text the API (``progress``), the CLI and the console
    show: ``16/16 documents processed · 1 failed``.

    ``done`` counts every item processed, succeeded, unchanged or failed alike (the API's
    ``documents.done``), so a job that has ended reads ``total/total`` and its failures are
    named beside it, never subtracted in one place and not in another.
    """
    unit = job_unit(kind)
    if state == "running" and done == 0:  # actors starting, or the first batch in flight
        return f"starting · 0/{total} {unit}"
    text = f"{done}/{total} {unit} processed"
    return f"{text} · {failed} failed" if failed else text


def resumable(job: JobRow) -> bool:
    """Whether :func:`resume` would queue the job again (``reopen_job``): an ended ingest job
    with items that never ran (pending or cancelled ones are not counted as done)."""
    ended = job.state in ("cancelled", "failed", "partially_failed")
    return job.kind == "ingest" and ended and job.documents_done < job.documents_total


def find_job(conn: psycopg.Connection, *, job_id: uuid.UUID, tenant_id: str | None) -> JobRow | None:
    """The job alone, None when no such job is visible to ``tenant_id``."""
    return jobs_repo.get_job(conn, job_id=job_id, tenant_id=tenant_id)


def get_job(conn: psycopg.Connection, *, job_id: uuid.UUID, tenant_id: str | None) -> JobDetail:
    """The job and its failed and warned items.

    Raises:
        NotFoundError: no such job visible to ``tenant_id``.
    """
    job = jobs_repo.get_job(conn, job_id=job_id, tenant_id=tenant_id)
    if job is None:
        raise NotFoundError(f"no job {job_id}")
    failed = jobs_repo.items(conn, job_id=job_id, state="failed")
    return JobDetail(job, failed, jobs_repo.warned_items(conn, job_id=job_id))


def list_jobs(
    conn: psycopg.Connection, *, tenant_id: str | None, state: str | None = None, limit: int = 100
) -> list[JobRow]:
    """Recent jobs, newest first."""
    return jobs_repo.list_jobs(conn, tenant_id=tenant_id, state=state, limit=limit)


def cancel(conn: psycopg.Connection, *, caller: Caller, job_id: uuid.UUID, tenant_id: str | None) -> JobRow:
    """Ask a job to stop between batches (a queued one is cancelled at once) and audit
    ``job.cancel``; items already written stay written.

    Raises:
        NotFoundError: no such job visible to ``tenant_id``.
    """
    with conn.transaction():
        job = jobs_repo.request_cancel(conn, job_id=job_id, tenant_id=tenant_id)
        if job is None:
            raise NotFoundError(f"no job {job_id}")
        _record(conn, "job.cancel", job, caller)
    return job


def resume(
    conn: psycopg.Connection,
    *,
    caller: Caller,
    job_id: uuid.UUID,
    tenant_id: str | None,
    runner: JobSubmitter | None,
) -> JobRow:
    """Queue an ended job again for its items that never ran, audit ``job.resume`` and, after
    the commit, tell ``runner``.

    Raises:
        NotFoundError: no such job visible to ``tenant_id``.
        UnavailableError: no runner here to run it.
        ConflictError: the job is not ended, or has no items left to run.
    """
    with conn.transaction():
        job = jobs_repo.get_job(conn, job_id=job_id, tenant_id=tenant_id)
        if job is None:
            raise NotFoundError(f"no job {job_id}")
        if runner is None:
            raise UnavailableError("the ingestion runner is not running")
        reopened = jobs_repo.reopen_job(conn, job_id=job_id, tenant_id=tenant_id)
        if reopened is None:
            raise ConflictError(f"job {job_id} is {job.state} and has no items left to run")
        _record(conn, "job.resume", reopened, caller)
    runner.submit(job_id)
    return reopened


# Runs a job in this process to its end: the job as it starts, the final state back (None
# when a live worker holds it). ``ragline jobs resume`` passes the runner with a progress bar.
RunHere = Callable[[JobRow], str | None]


def resume_here(conn: psycopg.Connection, *, caller: Caller, job_id: uuid.UUID, run: RunHere) -> str | None:
    """Finish an ingest job in this process and audit ``job.resume`` with its final state.

    An ended job is reopened for its items that never ran (the rule of :func:`resume`); one
    still queued or running (its worker died) is taken over as it is. Nothing is audited
    when ``run`` did not run it (a live worker holds it).

    Raises:
        NotFoundError: no such job.
        ConflictError: the job ended and has no items left to run.
    """
    with conn.transaction():
        job = jobs_repo.get_job(conn, job_id=job_id)
        if job is None:
            raise NotFoundError(f"no job {job_id}")
        if job.state in TERMINAL:
            reopened = jobs_repo.reopen_job(conn, job_id=job_id, tenant_id=None)
            if reopened is None:
                raise ConflictError(f"job {job_id} is {job.state} and has no items left to run")
            job = reopened
    state = run(job)
    if state is not None:
        with conn.transaction():
            resumed = jobs_repo.get_job(conn, job_id=job_id)
            if resumed is not None:
                _record(conn, "job.resume", resumed, caller)
    return state


def _record(conn: psycopg.Connection, action: str, job: JobRow, caller: Caller) -> None:
    audit.record(
        conn,
        actor=caller.actor,
        action=action,
        tenant_id=job.tenant_id,
        target=str(job.job_id),
        details={"kind": job.kind, "state": job.state, "via": caller.via},
    )

"""Job status, listing and cancellation."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import IngestPrincipal, JobsPrincipal, PoolDep, RunnerDep
from api.errors import error_responses
from api.schemas import ItemError, ItemWarnings, JobDocuments, JobOut, JobThroughput
from services import jobs as service
from services.caller import Caller

router = APIRouter(prefix="/v1", tags=["jobs"])

JobState = Annotated[
    str | None, Query(pattern="^(queued|running|succeeded|failed|partially_failed|cancelled)$")
]


def job_out(
    job: service.JobRow,
    errors: list[service.ItemRow],
    warned: list[service.ItemRow] | None = None,
) -> JobOut:
    """A job as the API shows it: counts, throughput, failed items and items with warnings."""
    end = job.finished_at or datetime.now(UTC)
    elapsed = (end - job.started_at).total_seconds() if job.started_at else 0.0
    rate = lambda n: round(n / elapsed, 3) if elapsed > 0 else 0.0  # noqa: E731
    left = job.documents_total - job.documents_done
    per_s = rate(job.chunks if job.kind == "reembed" else job.documents_done)
    report = job.params.get("report")
    return JobOut(
        cancel_requested=job.cancel_requested,
        resumable=service.resumable(job),
        eta_seconds=round(left / per_s, 1) if job.state == "running" and per_s > 0 and left > 0 else None,
        report=dict(report) if isinstance(report, dict) else None,
        job_id=str(job.job_id),
        kind=job.kind,
        state=job.state,
        unit=service.job_unit(job.kind),
        progress=service.progress_line(
            kind=job.kind,
            state=job.state,
            total=job.documents_total,
            done=job.documents_done,
            failed=job.documents_failed,
        ),
        documents=JobDocuments(
            total=job.documents_total,
            done=job.documents_done,
            failed=job.documents_failed,
            unchanged=job.documents_unchanged,
        ),
        pages=job.pages,
        chunks=job.chunks,
        bytes=job.bytes,
        throughput=JobThroughput(
            seconds=round(elapsed, 3),
            documents_per_s=rate(job.documents_done),
            chunks_per_s=rate(job.chunks),
            bytes_per_s=rate(job.bytes),
        ),
        created_at=job.created_at.isoformat(),
        started_at=job.started_at.isoformat() if job.started_at else None,
        finished_at=job.finished_at.isoformat() if job.finished_at else None,
        errors=[
            ItemError(
                item_no=i.item_no, external_id=i.external_id, code=i.error_code, message=i.error_message
            )
            for i in errors
        ],
        warnings=[
            ItemWarnings(item_no=i.item_no, external_id=i.external_id, warnings=list(i.warnings))
            for i in warned or []
        ],
    )


@router.get("/jobs/{job_id}", response_model=JobOut, responses=error_responses(401, 403, 429, 404, 422))
def get_job(job_id: uuid.UUID, principal: JobsPrincipal, pool: PoolDep) -> JobOut:
    with pool.connection() as conn:
        detail = service.get_job(conn, job_id=job_id, tenant_id=principal.tenant_id)
    return job_out(detail.job, detail.failed, detail.warned)


@router.get("/jobs", response_model=list[JobOut], responses=error_responses(401, 403, 429, 422))
def list_jobs(
    principal: JobsPrincipal,
    pool: PoolDep,
    state: JobState = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> list[JobOut]:
    with pool.connection() as conn:
        jobs = service.list_jobs(conn, tenant_id=principal.tenant_id, state=state, limit=limit)
    return [job_out(j, []) for j in jobs]


@router.post(
    "/jobs/{job_id}:cancel", response_model=JobOut, responses=error_responses(401, 403, 429, 404, 422)
)
def cancel_job(job_id: uuid.UUID, principal: JobsPrincipal, pool: PoolDep) -> JobOut:
    """Stops a job between batches; items already written stay written."""
    with pool.connection() as conn:
        job = service.cancel(
            conn, caller=Caller(principal.principal_id, "api"), job_id=job_id, tenant_id=principal.tenant_id
        )
    return job_out(job, [])


@router.post(
    "/jobs/{job_id}:resume",
    response_model=JobOut,
    responses=error_responses(401, 403, 429, 404, 409, 422, 503),
)
def resume_job(job_id: uuid.UUID, principal: IngestPrincipal, pool: PoolDep, runner: RunnerDep) -> JobOut:
    """Queue a cancelled or unfinished job again: only its items that never ran are done now."""
    with pool.connection() as conn:
        job = service.resume(
            conn,
            caller=Caller(principal.principal_id, "api"),
            job_id=job_id,
            tenant_id=principal.tenant_id,
            runner=runner,
        )
    return job_out(job, [])

"""Admin routes: group membership sync for connectors, and the deployment status."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from fastapi import APIRouter
from pydantic import Field, StrictBool, StrictFloat, StrictInt

from api.deps import (
    AdminOrOperator,
    AdminPrincipal,
    DatabaseUrlDep,
    OperatorPrincipal,
    OptionalSearchDep,
    PoolDep,
    ReembedDep,
    SettingsDep,
)
from api.errors import error_responses
from api.schemas import GroupsBody, GroupsOut, JobOut, Strict
from core.errors import ConfigError, InvalidInputError
from services import access
from services.caller import Caller
from services.status import StatusReport

router = APIRouter(prefix="/v1", tags=["admin"])


@router.put(
    "/principals/{principal_id}/groups",
    response_model=GroupsOut,
    responses=error_responses(401, 403, 429, 413, 422),
)
def put_groups(principal_id: str, body: GroupsBody, admin: AdminPrincipal, pool: PoolDep) -> GroupsOut:
    """Replace a principal's groups; effective for retrieval from the response on."""
    with pool.connection() as conn:
        groups = access.sync_groups(
            conn,
            Caller(admin.principal_id, "api"),
            tenant_id=admin.tenant_id,
            principal_id=principal_id,
            groups=body.groups,
        )
    return GroupsOut(principal=principal_id, groups=groups)


@router.get("/admin/status", response_model=StatusReport, responses=error_responses(401, 403, 429))
def status(
    admin: AdminOrOperator, pool: PoolDep, settings: SettingsDep, search: OptionalSearchDep
) -> StatusReport:
    """Live version per alias, model, shards, delta, jobs, last rebuild and migration,
    freshness lag and capacity headroom; ``node`` is what this replica serves. An operator
    sees the deployment; a tenant admin its own tenant's jobs, changes and delta only."""
    from wiring.status import deployment_status  # the search stack, only when asked

    tenant = None if admin.is_operator else admin.tenant_id
    with pool.connection() as conn:
        return deployment_status(settings, conn, tenant_id=tenant, search=search)


class ReembedIn(Strict):
    """A model migration: the target model and how to build and gate its version."""

    model: str = Field(min_length=1, max_length=1000, description="a sentence-transformers folder or name")
    chunking: str | None = Field(
        None, pattern=r"^\d{1,5}/\d{1,5}$", description="TOKENS/OVERLAP: re-chunk from the stored parsed text"
    )
    index_kind: Literal["flat", "hnsw", "ivfpq"] | None = None
    shards: StrictInt | None = Field(None, ge=1, le=1024)
    gate_dataset: str | None = Field(None, max_length=4096, description="a BEIR folder on the server")
    gate_tolerance: StrictFloat | None = Field(None, ge=0.0, le=1.0)
    query_file: str | None = Field(None, max_length=4096, description="tenant<TAB>query lines on the server")
    force: StrictBool = Field(False, description="swap even when the gate fails; recorded in the audit log")


@router.post(
    "/admin/reembed",
    response_model=JobOut,
    status_code=202,
    responses=error_responses(401, 403, 429, 409, 422),
)
def post_reembed(
    body: ReembedIn,
    admin: OperatorPrincipal,
    settings: SettingsDep,
    url: DatabaseUrlDep,
    worker: ReembedDep,
) -> JobOut:
    """Start a model migration (one at a time, operator only: it swaps ``live`` for every
    tenant); follow it with ``GET /v1/jobs/{job_id}``."""
    from api.routes.jobs import job_out
    from services.migration import ReembedArgs, start_on
    from wiring.reembed import reembed_config

    for path in (body.gate_dataset, body.query_file):
        if path is not None and not Path(path).exists():
            raise InvalidInputError(f"no such file or folder on the server: {path}")
    args = ReembedArgs(
        model=body.model,
        chunking=body.chunking,
        index_kind=body.index_kind,
        shards=body.shards,
        gate_dataset=body.gate_dataset,
        gate_tolerance=body.gate_tolerance,
        query_file=body.query_file,
        force=body.force,
    )
    try:
        config = reembed_config(
            settings, url, args, actor=admin.principal_id, tenant_id=admin.tenant_id, via="api"
        )
        job = start_on(worker, url, config)
    except ConfigError as exc:  # the caller named a model that cannot be loaded: their input
        raise InvalidInputError(exc.message) from exc
    return job_out(job, [])

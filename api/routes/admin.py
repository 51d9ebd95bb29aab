"""Admin routes: group membership sync for connectors, and the deployment status."""

from __future__ import annotations

from fastapi import APIRouter, Request

from api.deps import AdminPrincipal, PoolDep, SettingsDep
from api.errors import error_responses
from api.schemas import GroupsBody, GroupsOut, NodeStatusOut, ShardStatusOut, StatusOut
from authz.api_keys import validate_principal_id
from catalog import audit
from catalog import principals as repo
from core.errors import InvalidInputError

router = APIRouter(prefix="/v1", tags=["admin"])


@router.put(
    "/principals/{principal_id}/groups",
    response_model=GroupsOut,
    responses=error_responses(401, 403, 429, 413, 422),
)
def put_groups(principal_id: str, body: GroupsBody, admin: AdminPrincipal, pool: PoolDep) -> GroupsOut:
    """Replace a principal's groups; effective for retrieval from the response on."""
    validate_principal_id(principal_id)
    bad = [g for g in body.groups if not g.startswith("group:") or len(g) > 200]
    if bad:
        raise InvalidInputError(f"groups must look like group:<id>: {bad[:3]}")
    groups = sorted(set(body.groups))
    with pool.connection() as conn:
        repo.replace_groups(conn, tenant_id=admin.tenant_id, principal_id=principal_id, groups=body.groups)
        audit.record(
            conn,
            actor=admin.principal_id,
            action="principal.groups",
            tenant_id=admin.tenant_id,
            target=principal_id,
            details={"groups": groups},
        )
    return GroupsOut(principal=principal_id, groups=groups)


@router.get("/admin/status", response_model=StatusOut, responses=error_responses(401, 403, 429))
def status(request: Request, admin: AdminPrincipal, pool: PoolDep, settings: SettingsDep) -> StatusOut:
    """Live version per alias, model, shards, delta, jobs, last rebuild and migration,
    freshness lag and capacity headroom; ``node`` is what this replica serves."""
    from wiring.status import deployment_status  # the search stack, only when asked

    with pool.connection() as conn:
        report = deployment_status(settings, conn)
    out = StatusOut.model_validate(report)
    search = getattr(request.app.state, "search", None)
    if search is not None and search.state.loaded:
        snap, view = search.state.current, search.state.view
        out.node = NodeStatusOut(
            serving_version=snap.version_id,
            view_position=view.position,
            lag_positions=max(0, report.catalog_position - view.position),
            delta_chunks=snap.delta.size,
            shards=[
                ShardStatusOut.model_validate(s, from_attributes=True) for s in search.state.shard_stats()
            ],
        )
    return out

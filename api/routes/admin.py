"""Admin routes: group membership sync for connectors."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import AdminPrincipal, PoolDep
from api.errors import error_responses
from api.schemas import GroupsBody, GroupsOut
from authz.api_keys import validate_principal_id
from catalog import audit
from catalog import principals as repo
from core.errors import InvalidInputError

router = APIRouter(prefix="/v1", tags=["admin"])


@router.put(
    "/principals/{principal_id}/groups",
    response_model=GroupsOut,
    responses=error_responses(401, 403, 413, 422),
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

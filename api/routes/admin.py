"""Admin routes: group membership sync for connectors."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from api.deps import AdminPrincipal, PoolDep
from api.errors import error_responses
from api.schemas import GroupId, GroupsOut
from authz.api_keys import validate_principal_id
from catalog import audit
from catalog import principals as repo

router = APIRouter(prefix="/v1", tags=["admin"])


class GroupsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    groups: list[GroupId] = Field(default_factory=list, max_length=10_000)


@router.put(
    "/principals/{principal_id}/groups",
    response_model=GroupsOut,
    responses=error_responses(401, 403, 413, 422),
)
def put_groups(principal_id: str, body: GroupsBody, admin: AdminPrincipal, pool: PoolDep) -> GroupsOut:
    """Replace a principal's groups; effective for retrieval from the response on."""
    validate_principal_id(principal_id)
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

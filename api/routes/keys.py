"""The console's principals and keys: a tenant admin's keys and principals, inside its tenant
(``operator`` keys only by an operator)."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter

from api.console_schemas import KeyCreatedOut, KeyIn, KeyOut, PrincipalOut
from api.deps import AdminOrOperator, AdminPrincipal, KeyAuthDep, PoolDep
from api.errors import error_responses
from authz.principals import Principal
from services import access
from services.access import KeyRow
from services.caller import Caller

router = APIRouter(prefix="/v1/admin", tags=["console"])


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _console(admin: Principal) -> Caller:
    return Caller(admin.principal_id, "console")


@router.get("/principals", response_model=list[PrincipalOut], responses=error_responses(401, 403, 429))
def list_principals(admin: AdminPrincipal, pool: PoolDep) -> list[PrincipalOut]:
    """The tenant's principals with their groups (the console's "as principal" list)."""
    with pool.connection() as conn:
        rows = access.list_principals(conn, tenant_id=admin.tenant_id)
    return [
        PrincipalOut(
            principal_id=r.principal_id,
            groups=list(r.groups),
            active_keys=r.active_keys,
            created_at=r.created_at.isoformat(),
        )
        for r in rows
    ]


@router.get("/keys", response_model=list[KeyOut], responses=error_responses(401, 403, 429))
def list_keys(admin: AdminOrOperator, pool: PoolDep) -> list[KeyOut]:
    """The tenant's keys; never a secret nor its hash."""
    with pool.connection() as conn:
        return [_key_out(k) for k in access.list_keys(conn, tenant_id=admin.tenant_id)]


@router.post(
    "/keys",
    response_model=KeyCreatedOut,
    status_code=201,
    responses=error_responses(401, 403, 429, 413, 422),
)
def create(body: KeyIn, admin: AdminOrOperator, pool: PoolDep) -> KeyCreatedOut:
    """Create a key in the caller's tenant; the token is in this response only. Tenant
    roles need a tenant admin, ``operator`` an operator."""
    with pool.connection() as conn:
        issued = access.create_key(
            conn,
            _console(admin),
            access.authority_of(admin),
            tenant_id=admin.tenant_id,
            roles=body.roles,
            principal_id=body.principal_id,
            can_delegate=body.can_delegate,
            name=body.name,
        )
    return KeyCreatedOut(key=_key_out(issued.key), token=issued.token)


@router.post(
    "/keys/{key_id}:revoke", response_model=KeyOut, responses=error_responses(401, 403, 429, 404, 422)
)
def revoke_route(key_id: str, admin: AdminOrOperator, pool: PoolDep, auth: KeyAuthDep) -> KeyOut:
    """Revoke one of the tenant's keys (an operator key only by an operator); refused from
    this response on by this server, by the others once the revocation's notification
    reaches them (milliseconds; at most the key cache's second)."""
    with pool.connection() as conn:
        row = access.revoke_key(conn, _console(admin), access.authority_of(admin), key_id=key_id)
    auth.forget(row.key_id)  # committed: this process refuses it before answering
    return _key_out(row)


def _key_out(k: KeyRow) -> KeyOut:
    return KeyOut(
        key_id=k.key_id,
        principal_id=k.principal_id,
        roles=list(k.roles),
        can_delegate=k.can_delegate,
        name=k.name,
        state="revoked" if k.revoked_at else "active",
        created_at=k.created_at.isoformat(),
        last_used_at=_iso(k.last_used_at),
        revoked_at=_iso(k.revoked_at),
    )

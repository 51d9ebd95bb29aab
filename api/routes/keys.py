"""The console's principals and keys: a tenant admin's keys and principals, inside its tenant
(``operator`` keys only by an operator)."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter

from api.console_schemas import KeyCreatedOut, KeyIn, KeyOut, PrincipalOut
from api.deps import AdminOrOperator, AdminPrincipal, PoolDep
from api.errors import error_responses
from authz.api_keys import create_key, revoke, validate_principal_id
from authz.roles import check_grant
from catalog import principals as principals_repo
from catalog.principals import KeyRow
from core.errors import NotFoundError

router = APIRouter(prefix="/v1/admin", tags=["console"])


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


@router.get("/principals", response_model=list[PrincipalOut], responses=error_responses(401, 403, 429))
def list_principals(admin: AdminPrincipal, pool: PoolDep) -> list[PrincipalOut]:
    """The tenant's principals with their groups (the console's "as principal" list)."""
    with pool.connection() as conn:
        rows = principals_repo.list_principals(conn, tenant_id=admin.tenant_id)
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
        return [_key_out(k) for k in principals_repo.list_keys(conn, tenant_id=admin.tenant_id)]


@router.post(
    "/keys",
    response_model=KeyCreatedOut,
    status_code=201,
    responses=error_responses(401, 403, 429, 413, 422),
)
def create(body: KeyIn, admin: AdminOrOperator, pool: PoolDep) -> KeyCreatedOut:
    """Create a key in the caller's tenant; the token is in this response only. Tenant
    roles need a tenant admin, ``operator`` an operator."""
    check_grant(admin.roles, body.roles)
    principal = validate_principal_id(body.principal_id) if body.principal_id else None
    with pool.connection() as conn:
        key = create_key(
            conn,
            tenant_id=admin.tenant_id,
            roles=list(body.roles),
            principal_id=principal,
            can_delegate=body.can_delegate,
            name=body.name,
            actor=admin.principal_id,
            via="console",
        )
        row = principals_repo.get_key(conn, key_id=key.key_id)
    assert row is not None
    return KeyCreatedOut(key=_key_out(row), token=key.token)


@router.post(
    "/keys/{key_id}:revoke", response_model=KeyOut, responses=error_responses(401, 403, 429, 404, 422)
)
def revoke_route(key_id: str, admin: AdminOrOperator, pool: PoolDep) -> KeyOut:
    """Revoke one of the tenant's keys (an operator key only by an operator); refused
    everywhere within a second."""
    with pool.connection() as conn:
        before = principals_repo.get_key(conn, key_id=key_id)
        if before is None or before.tenant_id != admin.tenant_id:
            raise NotFoundError(f"no active key {key_id} in this tenant")
        check_grant(admin.roles, before.roles)
        done = revoke(conn, key_id=key_id, actor=admin.principal_id, tenant_id=admin.tenant_id, via="console")
        row = principals_repo.get_key(conn, key_id=key_id)
    if not done or row is None or row.tenant_id != admin.tenant_id:
        raise NotFoundError(f"no active key {key_id} in this tenant")
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

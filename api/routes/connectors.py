"""What a connector needs besides the push API: who its key is, the server's limits, and its
sync state in the catalog (cursor and item fingerprints), so a restart resumes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from api.deps import IngestPrincipal, PoolDep, PrincipalDep, SettingsDep
from api.errors import error_responses
from api.schemas import (
    ConnectorStateOut,
    ConnectorStateSaved,
    ConnectorStateUpdate,
    LimitsOut,
    MeOut,
)
from services import connectors as service
from services.caller import Caller

router = APIRouter(prefix="/v1", tags=["connectors"])

CONNECTOR_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
ConnectorPath = Annotated[str, Path(pattern=CONNECTOR_NAME)]


@router.get("/me", response_model=MeOut, responses=error_responses(401, 429))
def me(principal: PrincipalDep, settings: SettingsDep) -> MeOut:
    """The key's tenant, principal and roles, and the limits a client batches within."""
    return MeOut(
        tenant_id=principal.tenant_id,
        principal_id=principal.principal_id,
        roles=sorted(principal.roles),
        limits=LimitsOut(
            max_batch_documents=settings.api.max_batch_documents,
            max_body_bytes=settings.api.max_body_bytes,
            max_upload_bytes=settings.api.max_upload_bytes,
        ),
    )


@router.get(
    "/connectors/{connector}/state",
    response_model=ConnectorStateOut,
    responses=error_responses(401, 403, 429, 422),
)
def get_state(connector: ConnectorPath, principal: IngestPrincipal, pool: PoolDep) -> ConnectorStateOut:
    """The connector's cursor and fingerprints in the key's tenant; empty if it never saved."""
    with pool.connection() as conn:
        state = service.get_state(conn, tenant_id=principal.tenant_id, connector=connector)
    return ConnectorStateOut(
        connector=state.connector,
        tenant_id=state.tenant_id,
        cursor=state.cursor,
        documents=state.documents,
        groups=state.groups,
        updated_at=state.updated_at.isoformat() if state.updated_at else None,
    )


@router.patch(
    "/connectors/{connector}/state",
    response_model=ConnectorStateSaved,
    responses=error_responses(401, 403, 429, 413, 422),
)
def patch_state(
    connector: ConnectorPath, body: ConnectorStateUpdate, principal: IngestPrincipal, pool: PoolDep
) -> ConnectorStateSaved:
    """Merge fingerprints in or out and move the cursor (omitted or null: left as it is)."""
    change = service.StateChange(
        cursor=body.cursor,
        set_documents=body.set_documents,
        remove_documents=body.remove_documents,
        set_groups=body.set_groups,
        remove_groups=body.remove_groups,
    )
    with pool.connection() as conn:
        saved = service.save_state(
            conn,
            caller=Caller(principal.principal_id, "api"),
            tenant_id=principal.tenant_id,
            connector=connector,
            change=change,
        )
    return ConnectorStateSaved(
        connector=saved.connector,
        cursor=saved.cursor,
        documents=saved.documents,
        groups=saved.groups,
        updated_at=saved.updated_at.isoformat(),
    )


@router.delete(
    "/connectors/{connector}/state",
    response_model=ConnectorStateOut,
    responses=error_responses(401, 403, 429, 422),
)
def reset_state(connector: ConnectorPath, principal: IngestPrincipal, pool: PoolDep) -> ConnectorStateOut:
    """Forget the connector's state, so its next run sends everything again."""
    with pool.connection() as conn:
        service.reset_state(
            conn,
            caller=Caller(principal.principal_id, "api"),
            tenant_id=principal.tenant_id,
            connector=connector,
        )
    return ConnectorStateOut(
        connector=connector,
        tenant_id=principal.tenant_id,
        cursor=None,
        documents={},
        groups={},
        updated_at=None,
    )

"""``/v1/admin/fusion``: the admin's tenant's fusion defaults for ``/v1/retrieve``.

A request's own ``fusion`` fields win, then these, then the server's [retrieve] settings.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from api.deps import AdminPrincipal, PoolDep, SettingsDep
from api.errors import error_responses
from api.routes.retrieve import fusion_override
from api.schemas import FusionIn, FusionOut
from core.settings import Settings
from services import tenants
from services.caller import Caller
from services.tenants import FusionOverride

router = APIRouter(prefix="/v1/admin", tags=["admin"])


class TenantFusionOut(BaseModel):
    """``tenant``: the stored fields (null: none stored); ``settings``: the server's defaults;
    ``effective``: what a request that names no fusion of its own uses."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "tenant_id": "acme",
                    "tenant": {"method": "convex", "dense_weight": 0.7, "lexical_weight": 0.3},
                    "settings": {
                        "method": "rrf",
                        "rrf_k": 60,
                        "weights": {"dense": 1.0, "lexical": 1.0},
                        "candidates": {"dense": 50, "lexical": 50},
                    },
                    "effective": {
                        "method": "convex",
                        "rrf_k": 60,
                        "weights": {"dense": 0.7, "lexical": 0.3},
                        "candidates": {"dense": 50, "lexical": 50},
                    },
                }
            ]
        }
    )

    tenant_id: str
    tenant: dict[str, Any] | None
    settings: FusionOut
    effective: FusionOut


def _view(settings: Settings, tenant_id: str, stored: FusionOverride | None) -> TenantFusionOut:
    from wiring.search import fusion_config  # the search stack, only when asked

    base = fusion_config(settings)
    return TenantFusionOut(
        tenant_id=tenant_id,
        tenant=stored.given() if stored is not None else None,
        settings=FusionOut.model_validate(base.describe()),
        effective=FusionOut.model_validate(base.merged(stored).describe()),
    )


@router.get("/fusion", response_model=TenantFusionOut, responses=error_responses(401, 403, 429))
def get_fusion(admin: AdminPrincipal, pool: PoolDep, settings: SettingsDep) -> TenantFusionOut:
    """The tenant's fusion defaults, the server's, and the result of both."""
    with pool.connection() as conn:
        stored = tenants.fusion_defaults(conn, tenant_id=admin.tenant_id)
    return _view(settings, admin.tenant_id, stored)


@router.put("/fusion", response_model=TenantFusionOut, responses=error_responses(401, 403, 413, 422, 429))
def put_fusion(
    body: FusionIn, admin: AdminPrincipal, pool: PoolDep, settings: SettingsDep
) -> TenantFusionOut:
    """Replace the tenant's fusion defaults; fields left out fall back to the settings.
    Applies to every retrieve of the tenant from the response on (``ragline eval`` included)."""
    from wiring.search import fusion_config

    stored = fusion_override(body) or FusionOverride()
    with pool.connection() as conn:
        tenants.set_fusion(
            conn,
            Caller(admin.principal_id, "api"),
            tenant_id=admin.tenant_id,
            defaults=stored,
            base=fusion_config(settings),
        )
    return _view(settings, admin.tenant_id, stored)


@router.delete("/fusion", response_model=TenantFusionOut, responses=error_responses(401, 403, 429))
def delete_fusion(admin: AdminPrincipal, pool: PoolDep, settings: SettingsDep) -> TenantFusionOut:
    """Drop the tenant's fusion defaults: its requests use the server's settings again."""
    with pool.connection() as conn:
        tenants.reset_fusion(conn, Caller(admin.principal_id, "api"), tenant_id=admin.tenant_id)
    return _view(settings, admin.tenant_id, None)

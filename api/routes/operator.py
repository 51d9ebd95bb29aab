"""The operator console's admin API: search as any principal with the full diagnostics,
"why not?", principals and keys, index versions (swap, rollback, quality, GC).

Search, explain, principals and keys need a tenant admin key and stay inside its tenant;
index versions are deployment-wide (as in ``ragline index``) and need an operator key
(``authz.roles``). Built per app (``build_router(limits)``) because
the search route validates with the configured request limits.
"""

from __future__ import annotations

from datetime import datetime
from time import perf_counter
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from psycopg_pool import ConnectionPool

from api.console_schemas import (
    DebugRetrieveOut,
    ExplainIn,
    ExplainOut,
    PrincipalView,
)
from api.deps import AdmittedAdmin, PoolDep
from api.errors import error_responses
from api.observe import RetrieveObserver
from api.routes.retrieve import (
    document_filters,
    response_json,
    retrieve_audit,
    retrieve_request,
    search_service,
)
from api.schemas import RetrieveInBase, RetrieveLimits, retrieve_in_model
from authz.acl import build_acl_filter
from authz.api_keys import validate_principal_id
from authz.principals import CurrentPrincipal, KeyAuthenticator, Principal
from catalog import audit
from catalog import principals as principals_repo
from catalog.audit import AuditEvent
from core.errors import UnavailableError
from retrieve.explain import explain
from retrieve.service import RetrieveRequest


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _as(request: Request, admin: Principal, as_principal: str | None) -> CurrentPrincipal:
    auth: KeyAuthenticator = request.app.state.auth
    target = validate_principal_id(as_principal) if as_principal else admin.principal_id
    return auth.impersonate(admin, target)


def _view(
    pool: ConnectionPool,
    admin: Principal,
    current: CurrentPrincipal,
    action: str,
    entry: AuditEvent | None = None,
) -> PrincipalView:
    """The principal searched as, and its audit entry: ``entry`` when given (every admin
    search), else ``action`` when an admin acts as someone else."""
    p = current.principal
    with pool.connection() as conn:
        known = principals_repo.principal_exists(conn, tenant_id=p.tenant_id, principal_id=p.principal_id)
        if entry is not None:
            audit.record(
                conn,
                actor=entry.actor,
                action=entry.action,
                tenant_id=entry.tenant_id,
                target=entry.target,
                details=entry.details,
            )
        elif p.principal_id != admin.principal_id:
            audit.record(
                conn,
                actor=admin.principal_id,
                action=action,
                tenant_id=p.tenant_id,
                target=p.principal_id,
                details={"via": "console"},
            )
    return PrincipalView(principal_id=p.principal_id, groups=list(p.groups), known=known)


def _plans(plans: list[str]) -> list[dict[str, Any]]:
    """``shard3:filtered:120/400`` (StageLog's form) as objects."""
    out = []
    for text in plans:
        shard, strategy, counts = text.split(":", 2)
        allowed, total = counts.split("/")
        out.append(
            {
                "shard": int(shard.removeprefix("shard")),
                "strategy": strategy,
                "allowed": int(allowed),
                "total": int(total),
            }
        )
    return out


def build_router(limits: RetrieveLimits) -> APIRouter:
    router = APIRouter(prefix="/v1/admin", tags=["console"])

    def search_as(
        body: RetrieveInBase, request: Request, admin: AdmittedAdmin, pool: PoolDep
    ) -> JSONResponse:
        """Search as any principal of the tenant (``as_principal``; the admin itself when
        absent) and see every stage: ranks per list, plans, timings, degraded stages. Every
        call is audited (``admin.retrieve``) like a retrieve, whatever ``audit.retrieves`` says."""
        started = perf_counter()
        service = search_service(request)
        current = _as(request, admin, body.as_principal)
        acl = build_acl_filter(current.principal, document_filters(body.filters))
        req = retrieve_request(body)
        result = service.retrieve(req, acl, catalog_position=current.catalog_position)
        info = retrieve_audit(
            admin, current.principal.principal_id, body, req, current.catalog_position, started
        )
        observer: RetrieveObserver = request.app.state.observer
        entry = observer.event(result, info, service.state.model_name, action="admin.retrieve")
        out = response_json(result)
        for item, r in zip(out["results"], result.results, strict=True):
            item["ranks"] = r.stage_ranks
            item["found_by"] = [s for s in ("dense", "lexical") if s in r.stage_ranks]
        out["principal"] = _view(pool, admin, current, "console.search_as", entry).model_dump()
        out["plans"] = _plans(result.plans)
        out["model"] = service.state.model_name
        return JSONResponse(out)

    search_as.__annotations__["body"] = retrieve_in_model(limits)
    router.add_api_route(
        "/retrieve",
        search_as,
        methods=["POST"],
        response_model=DebugRetrieveOut,
        responses=error_responses(401, 403, 429, 413, 422, 503),
    )

    @router.post(
        "/explain", response_model=ExplainOut, responses=error_responses(401, 403, 429, 413, 422, 503)
    )
    def explain_route(body: ExplainIn, request: Request, admin: AdmittedAdmin, pool: PoolDep) -> ExplainOut:
        """Why a document (or chunk) is or is not returned to ``as_principal``: from the
        catalog, the serving index and, with ``query``, the real ranking. Never any text."""
        service = search_service(request)
        current = _as(request, admin, body.as_principal)
        acl = build_acl_filter(current.principal, document_filters(body.filters))
        try:
            service.watcher.catch_up_to(current.catalog_position)
        except Exception as exc:  # no current permission data: no answer rather than a stale one
            raise UnavailableError("permission data is unavailable; refusing to explain") from exc
        snap = service.state.current
        with pool.connection() as conn:
            why = explain(
                conn,
                acl=acl,
                snapshot=snap,
                model=service.state.model_name,
                external_id=body.external_id,
                chunk_id=body.chunk_id,
            )
        reasons, rank, depth = list(why.reasons), None, None
        if body.query and why.visible:
            depth = limits.max_top_k
            req = RetrieveRequest(query=body.query, top_k=depth, max_context_tokens=0)
            result = service.retrieve(req, acl, catalog_position=current.catalog_position)
            wanted = set(why.chunk_rows)
            rank = next((i for i, r in enumerate(result.results, start=1) if r.detail.row in wanted), None)
            if rank is None:
                reasons.append("below_top_k")
        return ExplainOut(
            visible=why.visible,
            reasons=reasons,
            rank=rank,
            granting_groups=list(why.granting_groups),
            granting_principals=list(why.granting_principals),
            filtered_by=list(why.filtered_by),
            principal=_view(pool, admin, current, "console.explain"),
            external_id=why.external_id,
            document_state=why.doc_state,
            current_version=why.current_version,
            chunk_version=why.chunk_version,
            superseded_by=why.superseded_by,
            public=why.public,
            chunks=why.chunks,
            indexed_chunks=why.indexed_chunks,
            delta_chunks=why.delta_chunks,
            index_version=snap.version_id,
            searched_top_k=depth,
        )

    return router

"""The operator console's search and "why not?": search as any principal of the tenant with
the full diagnostics, and why a document is or is not returned to one.

Both need a tenant admin key and stay inside its tenant (``authz.roles``); the operations
(acting as the principal, the fail-closed catch-up, the audit entries) are
``services.explain``'s. Built per app (``build_router(limits)``) because the search route
validates with the configured request limits and explain ranks as deep as they allow.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.console_schemas import DebugRetrieveOut, ExplainIn, ExplainOut, PrincipalView, explain_in_model
from api.deps import AdmittedAdmin, KeyAuthDep, ObserverDep, OptionalSearchDep, PoolDep
from api.errors import error_responses
from api.routes.retrieve import (
    bind_route,
    document_filters,
    response_json,
    retrieve_request,
    running,
    shown_filters,
)
from api.schemas import RetrieveInBase, RetrieveLimits, retrieve_in_model
from services import explain as console
from services.explain import SeenPrincipal


def _view(seen: SeenPrincipal) -> PrincipalView:
    return PrincipalView(principal_id=seen.principal_id, groups=list(seen.groups), known=seen.known)


def _plans(plans: list[str]) -> list[dict[str, Any]]:
    """``shard3:filtered:120/400`` (StageLog's form) as objects, without the total: a shard's
    size counts every tenant's vectors, which a tenant admin must not learn."""
    out = []
    for text in plans:
        shard, strategy, counts = text.split(":", 2)
        allowed, _total = counts.split("/")
        out.append({"shard": int(shard.removeprefix("shard")), "strategy": strategy, "allowed": int(allowed)})
    return out


def search_as(
    body: RetrieveInBase,
    admin: AdmittedAdmin,
    pool: PoolDep,
    search: OptionalSearchDep,
    auth: KeyAuthDep,
    observer: ObserverDep,
) -> JSONResponse:
    """Search as any principal of the tenant (``as_principal``; the admin itself when
    absent) and see every stage: ranks per list, plans, timings, degraded stages. Every
    call is audited (``admin.retrieve``) like a retrieve, whatever ``audit.retrieves`` says."""
    found = console.search_as(
        pool,
        running(search),
        auth,
        admin,
        as_principal=body.as_principal,
        req=retrieve_request(body),
        filters=document_filters(body.filters),
        shown_filters=shown_filters(body),
        store_query_text=observer.config.store_query_text,
    )
    result = found.result
    out = response_json(result)
    for item, r in zip(out["results"], result.results, strict=True):
        item["ranks"] = r.stage_ranks
        item["found_by"] = [s for s in ("dense", "lexical") if s in r.stage_ranks]
    out["principal"] = _view(found.principal).model_dump()
    out["plans"] = _plans(result.plans)
    out["model"] = result.embedding_model
    return JSONResponse(out)


def explain_route(
    body: ExplainIn,
    admin: AdmittedAdmin,
    pool: PoolDep,
    search: OptionalSearchDep,
    auth: KeyAuthDep,
    depth: int,
) -> ExplainOut:
    """Why a document (or chunk) is or is not returned to ``as_principal``: from the
    catalog, the serving index and, with ``query``, the real ranking. Never any text."""
    found = console.explain_as(
        pool,
        running(search),
        auth,
        admin,
        as_principal=body.as_principal,
        external_id=body.external_id,
        chunk_id=body.chunk_id,
        filters=document_filters(body.filters),
        query=body.query,
        depth=depth,
    )
    why = found.why
    return ExplainOut(
        visible=why.visible,
        reasons=list(found.reasons),
        rank=found.rank,
        granting_groups=list(why.granting_groups),
        granting_principals=list(why.granting_principals),
        filtered_by=list(why.filtered_by),
        principal=_view(found.principal),
        external_id=why.external_id,
        document_state=why.doc_state,
        current_version=why.current_version,
        chunk_version=why.chunk_version,
        superseded_by=why.superseded_by,
        public=why.public,
        chunks=why.chunks,
        indexed_chunks=why.indexed_chunks,
        delta_chunks=why.delta_chunks,
        index_version=found.index_version,
        searched_top_k=found.searched_top_k,
    )


def build_router(limits: RetrieveLimits) -> APIRouter:
    """The console's search and explain, with this app's request model and ranking depth."""
    router = APIRouter(prefix="/v1/admin", tags=["console"])
    errors = error_responses(401, 403, 429, 413, 422, 503)
    router.add_api_route(
        "/retrieve",
        bind_route(search_as, body=retrieve_in_model(limits)),
        methods=["POST"],
        response_model=DebugRetrieveOut,
        responses=errors,
    )
    router.add_api_route(
        "/explain",
        bind_route(explain_route, body=explain_in_model(limits), depth=limits.max_top_k),
        methods=["POST"],
        response_model=ExplainOut,
        responses=errors,
    )
    return router

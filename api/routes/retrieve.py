"""``POST /v1/retrieve`` (also ``POST /retrieve``): permission-filtered hybrid retrieval.

The request model carries the configured limits, so the router is built per app:
``build_router(limits)``.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from time import perf_counter
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from api.deps import AdmittedQuery
from api.errors import error_responses
from api.observe import RetrieveAudit, RetrieveObserver
from api.schemas import FiltersIn, FusionIn, RetrieveInBase, RetrieveLimits, RetrieveOut, retrieve_in_model
from authz.acl import DocumentFilters, build_acl_filter
from authz.api_keys import validate_principal_id
from authz.principals import KeyAuthenticator, Principal
from catalog.fusion import FusionOverride
from core.context import request_id_var
from core.errors import UnavailableError
from retrieve.service import RetrieveRequest, RetrieveResult, SearchService


def _as_datetime(value: datetime | date | None) -> datetime | None:
    """The schema's ``FilterInstant`` already made every date an aware datetime."""
    return value if value is None or isinstance(value, datetime) else None


def document_filters(f: FiltersIn) -> DocumentFilters:
    # An empty list applies no filter, for metadata keys as for source and mime_type.
    meta = {k: frozenset([v] if isinstance(v, str) else v) for k, v in f.metadata.items() if v}
    return DocumentFilters(
        sources=frozenset(f.source),
        mime_types=frozenset(f.mime_type),
        created_after=_as_datetime(f.created_after),
        created_before=_as_datetime(f.created_before),
        metadata=meta,
    )


def response_json(result: RetrieveResult) -> dict[str, Any]:
    """``RetrieveOut`` as plain JSON types (tests validate it against the model)."""
    results = [
        {
            "rank": i + 1,
            "chunk_id": r.detail.chunk_id,
            "document_external_id": r.detail.external_id,
            "title": r.detail.title,
            "text": r.detail.text,
            "score": r.score,
            "stage_scores": r.stage_scores,
            "page_range": [r.detail.page_start, r.detail.page_end] if r.detail.page_start else None,
            "section_path": list(r.detail.section_path),
            "char_offsets": [r.detail.char_start, r.detail.char_end],
            "metadata": r.detail.metadata,
        }
        for i, r in enumerate(result.results)
    ]
    ctx = result.context
    return {
        "results": results,
        "context": {
            "text": ctx.text,
            "token_count": ctx.token_count,
            "truncated": ctx.truncated,
            "notes": list(ctx.notes),
            "citations": [
                {"start": c.start, "end": c.end, "results": [i + 1 for i in c.result_indices]}
                for c in ctx.citations
            ],
        },
        "index_version": result.index_version,
        "embedding_model": result.embedding_model,
        "timings_ms": result.timings_ms,
        "degraded": result.degraded,
        "request_id": request_id_var.get(),
        "fusion": result.fusion.describe() if result.fusion is not None else None,
    }


def fusion_override(f: FusionIn | None) -> FusionOverride | None:
    """The request's (or an admin's) ``fusion`` as the fields it sets."""
    if f is None:
        return None
    weights, depth = f.weights, f.candidates
    return FusionOverride(
        method=f.method,
        rrf_k=f.rrf_k,
        dense_weight=weights.dense if weights else None,
        lexical_weight=weights.lexical if weights else None,
        dense_candidates=depth.dense if depth else None,
        lexical_candidates=depth.lexical if depth else None,
    )


def retrieve_request(body: RetrieveInBase) -> RetrieveRequest:
    return RetrieveRequest(
        query=re.sub(r"\s+", " ", body.query),
        top_k=body.top_k,
        mode=body.mode,
        rerank=body.rerank,
        max_context_tokens=body.max_context_tokens,
        expand_parent=body.expand == "parent",
        fusion=fusion_override(body.fusion),
    )


def search_service(request: Request) -> SearchService:
    service: SearchService | None = getattr(request.app.state, "search", None)
    if service is None:
        raise UnavailableError("the search service is not running")
    return service


def retrieve_audit(
    principal: Principal,
    on_behalf_of: str | None,
    body: RetrieveInBase,
    req: RetrieveRequest,
    catalog_position: int,
    started: float,
) -> RetrieveAudit:
    """What the audit records of one search (a retrieve, or a console search as anyone)."""
    return RetrieveAudit(
        principal=principal,
        on_behalf_of=on_behalf_of,
        query=req.query,
        mode=req.mode,
        top_k=req.top_k,
        filters=body.filters.model_dump(mode="json", exclude_defaults=True),
        catalog_position=catalog_position,
        latency_s=perf_counter() - started,
        request_id=request_id_var.get(),
    )


def _search(body: RetrieveInBase, request: Request, principal: Principal) -> JSONResponse:
    started = perf_counter()
    service = search_service(request)
    auth: KeyAuthenticator = request.app.state.auth
    if body.as_principal is not None:
        current = auth.delegate(principal, validate_principal_id(body.as_principal))
    else:
        current = auth.with_current_groups(principal)
    acl = build_acl_filter(current.principal, document_filters(body.filters))
    req = retrieve_request(body)
    # Plain JSON types already: skip FastAPI's jsonable_encoder walk over every result.
    # A returned Response is not validated again, so response_model only documents it.
    result = service.retrieve(req, acl, catalog_position=current.catalog_position)
    response = JSONResponse(response_json(result))
    observer: RetrieveObserver = request.app.state.observer
    info = retrieve_audit(principal, body.as_principal, body, req, current.catalog_position, started)
    observer.observe(result, info, model=request.app.state.settings.embedding_model)
    return response


def build_router(limits: RetrieveLimits) -> APIRouter:
    """The retrieval routes, validating requests with the model ``limits`` describe."""

    def retrieve(body: RetrieveInBase, request: Request, principal: AdmittedQuery) -> JSONResponse:
        """Search as the key's principal (or, for a delegating key, as ``as_principal``)."""
        return _search(body, request, principal)

    # FastAPI reads the body model from the annotation: this app's model, with its limits.
    # A fresh function per router, so two apps never share (or overwrite) an annotation.
    retrieve.__annotations__["body"] = retrieve_in_model(limits)
    router = APIRouter(tags=["retrieve"])
    errors = error_responses(401, 403, 413, 422, 429, 503)
    for path, documented in (("/v1/retrieve", True), ("/retrieve", False)):
        router.add_api_route(
            path,
            retrieve,
            methods=["POST"],
            response_model=RetrieveOut,
            responses=errors,
            include_in_schema=documented,
        )
    return router

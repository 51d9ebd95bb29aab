"""``POST /v1/retrieve`` (also ``POST /retrieve``): permission-filtered hybrid retrieval.

The request model carries the configured limits, so the router is built per app:
``build_router(limits)``; the search itself is ``services.search.retrieve_as``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from datetime import date, datetime
from typing import Any, TypeVar

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from api.deps import AdmittedQuery, KeyAuthDep, ObserverDep, OptionalSearchDep
from api.errors import error_responses
from api.schemas import FiltersIn, FusionIn, RetrieveInBase, RetrieveLimits, RetrieveOut, retrieve_in_model
from authz.acl import DocumentFilters
from core.context import request_id_var
from core.errors import UnavailableError
from retrieve.service import RetrieveRequest, RetrieveResult, SearchService
from services.search import retrieve_as
from services.tenants import FusionOverride

T = TypeVar("T")


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
        "reranker": result.reranker,
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
        language=body.language,
    )


def running(search: SearchService | None) -> SearchService:
    """The search service, checked in the handler rather than as ``SearchDep``: dependencies
    run before the body is validated, and a bad request is a 422 even where none runs."""
    if search is None:
        raise UnavailableError("the search service is not running")
    return search


def retrieve(
    body: RetrieveInBase,
    principal: AdmittedQuery,
    search: OptionalSearchDep,
    auth: KeyAuthDep,
    observer: ObserverDep,
) -> JSONResponse:
    """Search as the key's principal (or, for a delegating key, as ``as_principal``)."""
    searched = retrieve_as(
        running(search),
        auth,
        principal,
        as_principal=body.as_principal,
        req=retrieve_request(body),
        filters=document_filters(body.filters),
        shown_filters=shown_filters(body),
    )
    # Plain JSON types already: skip FastAPI's jsonable_encoder walk over every result.
    # A returned Response is not validated again, so response_model only documents it.
    response = JSONResponse(response_json(searched.result))
    observer.observe(searched.result, searched.audit)
    return response


def shown_filters(body: RetrieveInBase) -> dict[str, Any]:
    """The request's filters as the audit records them: what the caller set, in wire form."""
    return body.filters.model_dump(mode="json", exclude_defaults=True)


def build_router(limits: RetrieveLimits) -> APIRouter:
    """The retrieval routes, validating requests with the model ``limits`` describe."""

    route = bind_route(retrieve, body=retrieve_in_model(limits))
    router = APIRouter(tags=["retrieve"])
    errors = error_responses(401, 403, 413, 422, 429, 503)
    for path, documented in (("/v1/retrieve", True), ("/retrieve", False)):
        router.add_api_route(
            path,
            route,
            methods=["POST"],
            response_model=RetrieveOut,
            responses=errors,
            include_in_schema=documented,
        )
    return router


def bind_route(
    handler: Callable[..., JSONResponse | T], *, body: type[BaseModel] | None = None, **fixed: Any
) -> Callable[..., JSONResponse | T]:
    """A copy of the module-level ``handler`` for one app's router: its ``body`` parameter
    typed ``body`` (the app's request model, with its limits: FastAPI reads it from the
    signature) and the ``fixed`` parameters given (and out of the request's signature). A copy
    per router keeps two apps from sharing (or overwriting) an annotation."""
    signature = inspect.signature(handler, eval_str=True)  # the handler's module's names, resolved

    def bound(**kwargs: Any) -> JSONResponse | T:
        return handler(**kwargs, **fixed)

    bound.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[
            p.replace(annotation=body) if p.name == "body" and body is not None else p
            for p in signature.parameters.values()
            if p.name not in fixed
        ]
    )
    bound.__name__, bound.__doc__ = handler.__name__, handler.__doc__
    return bound

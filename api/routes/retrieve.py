"""``POST /v1/retrieve`` (also ``POST /retrieve``): permission-filtered hybrid retrieval."""

from __future__ import annotations

import re
from datetime import date, datetime, time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from api.deps import QueryPrincipal
from authz.acl import DocumentFilters, build_acl_filter
from authz.api_keys import validate_principal_id
from authz.principals import KeyAuthenticator
from core.context import request_id_var
from core.errors import UnavailableError
from retrieve.service import RetrieveRequest, RetrieveResult, SearchService

router = APIRouter(tags=["retrieve"])

FilterValue = Annotated[str, StringConstraints(min_length=1, max_length=500)]


class FiltersIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: list[FilterValue] = Field(default_factory=list, max_length=100)
    mime_type: list[FilterValue] = Field(default_factory=list, max_length=10)
    created_after: datetime | date | None = None
    created_before: datetime | date | None = None
    metadata: dict[
        Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")],
        FilterValue | list[FilterValue],
    ] = Field(default_factory=dict, max_length=32)


class RetrieveIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: Annotated[str, StringConstraints(min_length=1, max_length=2000, strip_whitespace=True)]
    top_k: int = Field(8, ge=1, le=100)
    mode: Literal["hybrid", "dense", "lexical"] = "hybrid"
    filters: FiltersIn = Field(default_factory=FiltersIn)
    rerank: bool | None = None
    max_context_tokens: int = Field(1500, ge=16, le=16_000)
    expand: Literal["none", "parent"] = "none"
    as_principal: Annotated[str, StringConstraints(max_length=256)] | None = None


def _as_datetime(value: datetime | date | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value if value is None or value.tzinfo else value.astimezone()
    return datetime.combine(value, time.min).astimezone()


def _filters(f: FiltersIn) -> DocumentFilters:
    meta = {k: frozenset([v] if isinstance(v, str) else v) for k, v in f.metadata.items()}
    return DocumentFilters(
        sources=frozenset(f.source),
        mime_types=frozenset(f.mime_type),
        created_after=_as_datetime(f.created_after),
        created_before=_as_datetime(f.created_before),
        metadata=meta,
    )


def _response(result: RetrieveResult) -> dict[str, Any]:
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
        "timings_ms": result.timings_ms,
        "degraded": result.degraded,
        "request_id": request_id_var.get(),
    }


def retrieve(body: RetrieveIn, request: Request, principal: QueryPrincipal) -> JSONResponse:
    """Search as the key's principal (or, for a delegating key, as ``as_principal``)."""
    service: SearchService | None = getattr(request.app.state, "search", None)
    if service is None:
        raise UnavailableError("the search service is not running")
    auth: KeyAuthenticator = request.app.state.auth
    if body.as_principal is not None:
        current = auth.delegate(principal, validate_principal_id(body.as_principal))
    else:
        current = auth.with_current_groups(principal)
    acl = build_acl_filter(current.principal, _filters(body.filters))
    req = RetrieveRequest(
        query=re.sub(r"\s+", " ", body.query),
        top_k=body.top_k,
        mode=body.mode,
        rerank=body.rerank,
        max_context_tokens=body.max_context_tokens,
        expand_parent=body.expand == "parent",
    )
    # Plain JSON types already: skip FastAPI's jsonable_encoder walk over every result.
    result = service.retrieve(req, acl, catalog_position=current.catalog_position)
    return JSONResponse(_response(result))


router.add_api_route("/v1/retrieve", retrieve, methods=["POST"])
router.add_api_route("/retrieve", retrieve, methods=["POST"], include_in_schema=False)

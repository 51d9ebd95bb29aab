"""Request and response models with limits, so bad input gets a 422, never a 500.

Response models document every answer in ``/openapi.json``; limits that settings hold reach
the request model through ``retrieve_in_model``, built once per app.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import date, datetime
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StringConstraints,
    create_model,
    field_validator,
    model_validator,
)

from core.settings import MIN_CONTEXT_TOKENS

MIME_TYPES = ("application/pdf", "text/html", "text/markdown", "text/plain")
MimeType = Literal["application/pdf", "text/html", "text/markdown", "text/plain"]
AclEntry = Annotated[str, StringConstraints(pattern=r"^(user|group|service):[^\s]{1,200}$")]
MetaKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")]
MetaValue = Annotated[str, StringConstraints(max_length=2000)] | int | float | bool | None


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AclIn(Strict):
    principals: list[AclEntry] = Field(default_factory=list, max_length=1000)
    public: bool = False


class DocumentIn(Strict):
    external_id: Annotated[str, StringConstraints(min_length=1, max_length=512)]
    title: Annotated[str, StringConstraints(max_length=1000)] | None = None
    text: str | None = None
    content_base64: str | None = None
    mime_type: MimeType | None = None
    metadata: dict[MetaKey, MetaValue] = Field(default_factory=dict, max_length=64)
    acl: AclIn = Field(default_factory=AclIn)

    @model_validator(mode="after")
    def _one_body(self) -> DocumentIn:
        if (self.text is None) == (self.content_base64 is None):
            raise ValueError("give exactly one of text or content_base64")
        if self.content_base64 is not None and self.mime_type is None:
            raise ValueError("content_base64 needs a mime_type")
        return self

    def content(self) -> bytes:
        if self.text is not None:
            return self.text.encode("utf-8")
        try:
            return base64.b64decode(self.content_base64 or "", validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError("content_base64 is not valid base64") from exc

    @property
    def effective_mime(self) -> str:
        return self.mime_type or "text/plain"


class PushRequest(Strict):
    documents: list[dict] = Field(min_length=1)


class Rejection(BaseModel):
    index: int
    external_id: str | None
    code: str
    message: str


class PushResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "job_id": "0b7e3c1a-5f7d-4d8e-9a63-2f4b8c1d9e70",
                    "accepted": 2,
                    "rejections": [
                        {
                            "index": 2,
                            "external_id": "doc-3",
                            "code": "duplicate_external_id",
                            "message": "external_id appears twice in this batch",
                        }
                    ],
                }
            ]
        }
    )
    job_id: str | None
    accepted: int
    rejections: list[Rejection]


class ItemError(BaseModel):
    item_no: int
    external_id: str
    code: str | None
    message: str | None


class JobDocuments(BaseModel):
    total: int
    done: int
    failed: int
    unchanged: int


class JobThroughput(BaseModel):
    seconds: float
    documents_per_s: float
    chunks_per_s: float
    bytes_per_s: float


class JobOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "job_id": "0b7e3c1a-5f7d-4d8e-9a63-2f4b8c1d9e70",
                    "kind": "ingest",
                    "state": "partially_failed",
                    "documents": {"total": 3, "done": 2, "failed": 1, "unchanged": 0},
                    "pages": 14,
                    "chunks": 61,
                    "bytes": 183422,
                    "throughput": {
                        "seconds": 2.314,
                        "documents_per_s": 0.864,
                        "chunks_per_s": 26.361,
                        "bytes_per_s": 79266.206,
                    },
                    "created_at": "2026-01-05T09:12:03.120431+00:00",
                    "started_at": "2026-01-05T09:12:03.402117+00:00",
                    "finished_at": "2026-01-05T09:12:05.716002+00:00",
                    "errors": [
                        {
                            "item_no": 2,
                            "external_id": "scan.pdf",
                            "code": "encrypted_pdf",
                            "message": "the PDF is encrypted",
                        }
                    ],
                }
            ]
        }
    )
    job_id: str
    kind: str
    state: str
    documents: JobDocuments
    pages: int
    chunks: int
    bytes: int
    throughput: JobThroughput
    created_at: str
    started_at: str | None
    finished_at: str | None
    errors: list[ItemError] = Field(default_factory=list)
    # A running job's estimated seconds left (a migration counts chunks in ``documents``).
    eta_seconds: float | None = None
    # A migration's report: capacity check, backfill, gate results, the swap (or why not).
    report: dict[str, JsonValue] | None = None


class AclUpdate(Strict):
    principals: list[AclEntry] = Field(default_factory=list, max_length=1000)
    public: bool = False

    @field_validator("principals")
    @classmethod
    def _dedupe(cls, value: list[str]) -> list[str]:
        return sorted(set(value))


class AclView(BaseModel):
    principals: list[str]
    public: bool


class DocumentAclOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"external_id": "runbook-42", "acl": {"principals": ["group:sre"], "public": False}}]
        }
    )
    external_id: str
    acl: AclView


class DocumentDeletedOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"external_id": "runbook-42", "deleted": True, "chunks_tombstoned": 12}]
        }
    )
    external_id: str
    deleted: bool
    chunks_tombstoned: int


class GroupsOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"principal": "user:bob", "groups": ["group:eng", "group:sre"]}]}
    )
    principal: str
    groups: list[str]


class HealthOut(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"status": "ok"}]})
    status: Literal["ok"]


class ReadyChecks(BaseModel):
    database: str
    indexes: str


class ReadyOut(BaseModel):
    """Readiness; ``not_ready`` comes with status 503 and the failing check's reason."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"status": "ready", "checks": {"database": "ok", "indexes": "ok"}},
                {"status": "not_ready", "checks": {"database": "unavailable: PoolTimeout", "indexes": "ok"}},
            ]
        }
    )
    status: Literal["ready", "not_ready"]
    checks: ReadyChecks


# --- retrieval ------------------------------------------------------------------------------

FilterValue = Annotated[str, StringConstraints(min_length=1, max_length=500)]


class FiltersIn(Strict):
    source: list[FilterValue] = Field(default_factory=list, max_length=100)
    mime_type: list[FilterValue] = Field(default_factory=list, max_length=10)
    created_after: datetime | date | None = None
    created_before: datetime | date | None = None
    metadata: dict[MetaKey, FilterValue | list[FilterValue]] = Field(default_factory=dict, max_length=32)


@dataclass(frozen=True, slots=True)
class RetrieveLimits:
    """The request limits and defaults of ``/v1/retrieve``; the app builds them from settings."""

    max_top_k: int
    default_top_k: int
    max_query_chars: int
    default_context_tokens: int
    max_context_tokens: int


class RetrieveInBase(Strict):
    """The shape of a retrieval request. The fields whose limits settings hold have none
    here: ``retrieve_in_model`` gives them, so use the model it builds, not this one."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "query": "how do I fail over the PostgreSQL primary?",
                    "top_k": 5,
                    "filters": {"source": ["runbooks"], "created_after": "2025-01-01"},
                    "max_context_tokens": 400,
                }
            ]
        }
    )
    query: str
    top_k: int
    mode: Literal["hybrid", "dense", "lexical"] = "hybrid"
    filters: FiltersIn = Field(default_factory=FiltersIn)
    rerank: bool | None = None
    max_context_tokens: int
    expand: Literal["none", "parent"] = "none"
    as_principal: Annotated[str, StringConstraints(max_length=256)] | None = None


def retrieve_in_model(limits: RetrieveLimits) -> type[RetrieveInBase]:
    """The request model of one app: ``RetrieveInBase`` with the configured limits, so both
    validation and ``/openapi.json`` follow the settings."""
    query = Annotated[
        str, StringConstraints(min_length=1, max_length=limits.max_query_chars, strip_whitespace=True)
    ]
    return create_model(
        "RetrieveIn",
        __base__=RetrieveInBase,
        __module__=__name__,
        __doc__="A retrieval request; the bounds of top_k, query and max_context_tokens are this"
        " deployment's settings.",
        query=(query, ...),
        top_k=(int, Field(limits.default_top_k, ge=1, le=limits.max_top_k)),
        max_context_tokens=(
            int,
            Field(limits.default_context_tokens, ge=MIN_CONTEXT_TOKENS, le=limits.max_context_tokens),
        ),
    )


class ResultOut(BaseModel):
    rank: int
    chunk_id: str
    document_external_id: str
    title: str | None
    text: str
    score: float
    stage_scores: dict[str, float]
    page_range: tuple[int, int] | None
    section_path: list[str]
    char_offsets: tuple[int, int]
    metadata: dict[str, JsonValue]


class CitationOut(BaseModel):
    """A span ``[start, end)`` of ``context.text`` and the ranks of the results it quotes."""

    start: int
    end: int
    results: list[int]


class ContextOut(BaseModel):
    text: str
    token_count: int
    truncated: bool
    notes: list[str]
    citations: list[CitationOut]


class DegradedStage(BaseModel):
    stage: str
    reason: str


# The route builds this shape as plain JSON (skipping FastAPI's encoder on the hot path);
# tests validate real answers against the model so the two cannot drift.
class RetrieveOut(BaseModel):
    """Ranked results, the context packed from them with citations, and how it was served."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "results": [
                        {
                            "rank": 1,
                            "chunk_id": "9f2d4c7e1b3a5f60",
                            "document_external_id": "runbook-42",
                            "title": "PostgreSQL failover",
                            "text": "Promote the standby with pg_ctl promote, then repoint the pooler.",
                            "score": 0.0325,
                            "stage_scores": {"dense": 0.71, "lexical": 7.94},
                            "page_range": [3, 3],
                            "section_path": ["Operations", "Failover"],
                            "char_offsets": [1840, 1906],
                            "metadata": {"source": "runbooks", "team": "sre"},
                        }
                    ],
                    "context": {
                        "text": "Promote the standby with pg_ctl promote, then repoint the pooler.",
                        "token_count": 15,
                        "truncated": False,
                        "notes": [],
                        "citations": [{"start": 0, "end": 66, "results": [1]}],
                    },
                    "index_version": "v-20260105-091203",
                    "embedding_model": "bundled:all-MiniLM-L6-v2",
                    "timings_ms": {
                        "acl_filter": 0.4,
                        "embed": 6.1,
                        "dense": 1.2,
                        "lexical": 0.9,
                        "fusion": 0.1,
                    },
                    "degraded": [],
                    "request_id": "4f1c2b9e0a7d4c3e8b6a5d2f1e0c9b8a",
                }
            ]
        }
    )
    results: list[ResultOut]
    context: ContextOut
    index_version: str
    embedding_model: str = Field(description="the model of index_version, which embedded the query")
    timings_ms: dict[str, float]
    degraded: list[DegradedStage]
    request_id: str

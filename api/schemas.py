"""Request and response models with limits, so bad input gets a 422, never a 500.

Response models document every answer in ``/openapi.json``; limits that settings hold reach
the request model through ``retrieve_in_model``, built once per app.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    create_model,
    field_validator,
    model_validator,
)

from core import validation
from core.errors import InvalidInputError
from core.settings import MIN_CONTEXT_TOKENS

MIME_TYPES = ("application/pdf", "text/html", "text/markdown", "text/plain")
MimeType = Literal["application/pdf", "text/html", "text/markdown", "text/plain"]


def _rule(check: Callable[[str], str]) -> AfterValidator:
    """A ``core.validation`` rule as a pydantic validator (its message becomes the 422's)."""

    def run(value: str) -> str:
        try:
            return check(value)
        except InvalidInputError as exc:
            raise ValueError(exc.message) from None

    return AfterValidator(run)


# The edge's types: one set of rules (core/validation.py) for the API, the CLI and the jobs.
AclEntry = Annotated[str, _rule(validation.acl_principal)]
GroupId = Annotated[str, _rule(validation.group_id)]
PrincipalId = Annotated[str, StringConstraints(max_length=256), _rule(validation.principal_id)]
ExternalId = Annotated[str, _rule(validation.external_id)]
SafeText = Annotated[str, _rule(validation.no_nul)]
MetaKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")]
# Values that decide access or filtering are strict: "yes", "on" or 1 are not booleans.
MetaValue = (
    Annotated[str, StringConstraints(max_length=2000), _rule(validation.no_nul)]
    | StrictBool
    | StrictInt
    | StrictFloat
    | None
)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AclIn(Strict):
    principals: list[AclEntry] = Field(default_factory=list, max_length=1000)
    public: StrictBool = False


class DocumentIn(Strict):
    external_id: ExternalId
    title: Annotated[SafeText, StringConstraints(max_length=1000)] | None = None
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


class ItemWarnings(BaseModel):
    """An item that was indexed with warnings, such as ``mislabelled_content``."""

    item_no: int
    external_id: str
    warnings: list[str]


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
                    "warnings": [
                        {
                            "item_no": 1,
                            "external_id": "notes.txt",
                            "warnings": [
                                "mislabelled_content: declared text/plain, parsed as application/pdf"
                            ],
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
    warnings: list[ItemWarnings] = Field(default_factory=list)


class AclUpdate(Strict):
    principals: list[AclEntry] = Field(default_factory=list, max_length=1000)
    public: StrictBool = False

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

FilterValue = Annotated[str, StringConstraints(min_length=1, max_length=500), _rule(validation.no_nul)]


def _instant(value: datetime | date) -> datetime:
    try:
        return validation.filter_instant(value)
    except InvalidInputError as exc:
        raise ValueError(exc.message) from None


# A date or datetime, as an aware datetime (a date or naive time is UTC).
FilterInstant = Annotated[datetime | date, AfterValidator(_instant)]


_EMPTY_LIST = "An empty list applies no filter, the same as leaving the field out."


class FiltersIn(Strict):
    """Conditions a result must meet (all of them). A list matches any of its values; an
    empty list applies no filter on that field, for ``source``, ``mime_type`` and every
    ``metadata`` key alike. Dates without a time zone are UTC."""

    source: list[FilterValue] = Field(default_factory=list, max_length=100, description=_EMPTY_LIST)
    mime_type: list[FilterValue] = Field(default_factory=list, max_length=10, description=_EMPTY_LIST)
    created_after: FilterInstant | None = None
    created_before: FilterInstant | None = None
    metadata: dict[MetaKey, FilterValue | list[FilterValue]] = Field(
        default_factory=dict,
        max_length=32,
        description="metadata key -> value or list of values. " + _EMPTY_LIST,
    )


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
    as_principal: PrincipalId | None = None


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
    timings_ms: dict[str, float]
    degraded: list[DegradedStage]
    request_id: str

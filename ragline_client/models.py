"""The wire models of the ragline HTTP API, shared by the server and this client.

The server's routes declare these as their request and response models (``api/schemas.py``
re-exports them), so ``/openapi.json`` and the client validate one definition and cannot
drift. Limits that a deployment's settings hold (``top_k``, query length, batch size) are not
here: the server adds them (``retrieve_in_model``) and tells clients through ``GET /v1/me``.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
from datetime import date, datetime
from pathlib import PurePath
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ragline_client import rules

# What the server parses (ingest/parse.py's PARSERS; the README's supported-formats table).
MimeType = Literal[
    "application/pdf",
    "text/html",
    "text/markdown",
    "text/plain",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "text/csv",
    "application/epub+zip",
    "application/vnd.oasis.opendocument.text",
    "application/vnd.oasis.opendocument.presentation",
    "application/vnd.oasis.opendocument.spreadsheet",
    "message/rfc822",
    "image/png",
    "image/jpeg",
    "image/tiff",
]
MIME_TYPES: tuple[str, ...] = get_args(MimeType)
# Suffixes ``mimetypes`` does not know (or knows differently per system) for parsed types.
_SUFFIX_TYPES = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".rst": "text/plain",
    ".odt": "application/vnd.oasis.opendocument.text",
    ".odp": "application/vnd.oasis.opendocument.presentation",
    ".ods": "application/vnd.oasis.opendocument.spreadsheet",
}


def mime_for_name(name: str) -> str | None:
    """The content type a file name's suffix says, if any (it may be one the server does not
    parse: compare with ``MIME_TYPES``). Shared by the client and the server's upload route."""
    return _SUFFIX_TYPES.get(PurePath(name).suffix.lower()) or mimetypes.guess_type(name)[0]


# The edge's types: one set of rules (ragline_client/rules.py) for the API, the CLI and the jobs.
AclEntry = Annotated[str, AfterValidator(rules.acl_principal)]
GroupId = Annotated[str, AfterValidator(rules.group_id)]
PrincipalId = Annotated[str, StringConstraints(max_length=256), AfterValidator(rules.principal_id)]
ExternalId = Annotated[str, AfterValidator(rules.external_id)]
SafeText = Annotated[str, AfterValidator(rules.no_nul)]
# A label shown on one line (a title): no control character at all, tab and line feed included.
Label = Annotated[str, AfterValidator(rules.no_control)]
# Free-form text a filter matches exactly: tab, line feed and carriage return, no other control.
PlainText = Annotated[str, AfterValidator(rules.no_control_in_text)]
MetaKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")]
MAX_METADATA_KEYS = 64  # on one pushed document
# Values that decide access or filtering are strict: "yes", "on" or 1 are not booleans.
MetaValue = (
    Annotated[PlainText, StringConstraints(max_length=2000)] | StrictBool | StrictInt | StrictFloat | None
)


class Strict(BaseModel):
    """The base of every request model: unknown fields are refused, every string (dict keys
    included) must be Unicode text without NUL, every number finite.

    Scalars that decide access or limits are declared ``StrictBool``/``StrictInt``/
    ``StrictFloat`` (``tests/unit/api/test_request_models.py`` walks every route's body and
    fails on a lax one). The text rule is checked here, once for every field of every
    subclass, so a field added later is covered without remembering to; only the fields in
    ``NUL_ALLOWED`` may hold NUL (a document's text, where the parser strips it and warns).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    NUL_ALLOWED: ClassVar[frozenset[str]] = frozenset()
    # Fields whose items the route validates one by one (a push's documents), so one bad
    # item is rejected alone instead of failing the whole body.
    PER_ITEM: ClassVar[frozenset[str]] = frozenset()

    @field_validator("*", mode="after")
    @classmethod
    def _text_and_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name or "value"
        if isinstance(value, BaseModel) or name in cls.PER_ITEM:
            return value  # a nested request model checked its own fields
        return rules.check_value(value, name, allow_nul=name in cls.NUL_ALLOWED)


class AclIn(Strict):
    principals: list[AclEntry] = Field(default_factory=list, max_length=1000)
    public: StrictBool = False


class DocumentIn(Strict):
    NUL_ALLOWED = frozenset({"text"})
    model_config = ConfigDict(
        # What the per-document checks require, so a schema-valid document is one the
        # server takes: exactly one body, and a type with base64 content.
        json_schema_extra={
            "oneOf": [
                {"required": ["text"], "not": {"required": ["content_base64"]}},
                {"required": ["content_base64", "mime_type"], "not": {"required": ["text"]}},
            ]
        }
    )
    external_id: ExternalId
    title: Annotated[Label, StringConstraints(max_length=1000)] | None = None
    text: str | None = None
    content_base64: str | None = None
    mime_type: MimeType | None = None
    metadata: dict[MetaKey, MetaValue] = Field(default_factory=dict, max_length=MAX_METADATA_KEYS)
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


class Rejection(BaseModel):
    index: int
    external_id: str | None
    code: str
    message: str


class PushWarning(BaseModel):
    """An accepted document that will not behave as its pusher may expect: ``no_readers``
    (an empty ACL, not public: no query key can read it until ``PUT .../acl`` names readers)."""

    index: int
    external_id: str
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
    warnings: list[PushWarning] = Field(default_factory=list)


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
    """A job's counts, in its ``unit`` (a model migration counts chunks)."""

    total: int
    # Processed so far: succeeded, unchanged and failed alike; ``failed`` names the failures.
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
                    "unit": "documents",
                    "documents": {"total": 3, "done": 3, "failed": 1, "unchanged": 0},
                    "progress": "3/3 documents processed · 1 failed",
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
    # What ``documents`` counts: ``chunks`` for a model migration (``reembed``), else ``documents``.
    unit: Literal["documents", "chunks"] = "documents"
    # The counts in words, as the CLI and the console show them: ``16/16 documents processed · 1 failed``.
    progress: str = ""
    pages: int
    chunks: int
    bytes: int
    throughput: JobThroughput
    created_at: str
    started_at: str | None
    finished_at: str | None
    errors: list[ItemError] = Field(default_factory=list)
    warnings: list[ItemWarnings] = Field(default_factory=list)
    # A running job's estimated seconds left.
    eta_seconds: float | None = None
    # A migration's report: capacity check, backfill, gate results, the swap (or why not).
    report: dict[str, JsonValue] | None = None
    # A cancel was accepted: a running job stops at its next batch (state stays running till then).
    cancel_requested: bool = False
    # ``:resume`` would queue it again: an ingest job that ended with items that never ran.
    resumable: bool = False


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

FilterValue = Annotated[PlainText, StringConstraints(min_length=1, max_length=500)]
# A date or datetime, as an aware datetime (a date or naive time is UTC).
FilterInstant = Annotated[datetime | date, AfterValidator(rules.filter_instant)]

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


# The keyword-only search is called ``lexical``; ``bm25`` (its scoring, and what ``ragline
# eval`` used to call it) is accepted everywhere as the same mode.
MODE_ALIASES = {"bm25": "lexical"}


def canonical_mode(value: object) -> object:
    """``value`` with an alias replaced by the mode's name (anything else unchanged)."""
    return MODE_ALIASES.get(value, value) if isinstance(value, str) else value


SearchMode = Annotated[Literal["hybrid", "dense", "lexical"], BeforeValidator(canonical_mode)]
# The languages lexical analysis can stem (ISO 639-1; the server's index.tokenize.SNOWBALL).
QueryLanguage = Literal["en", "de", "fr", "es", "it", "nl", "pt", "sv", "da", "no", "fi", "ru"]


FusionWeight = Annotated[float, Field(strict=True, ge=0.0, le=1000.0, allow_inf_nan=False)]
FusionDepth = Annotated[int, Field(strict=True, ge=1, le=2000)]


class FusionWeightsIn(Strict):
    """Per-leg weights; relative (scaling both keeps the order), 0 drops the leg."""

    dense: FusionWeight | None = None
    lexical: FusionWeight | None = None


class FusionDepthIn(Strict):
    """How many candidates each leg fetches before fusion (never fewer than ``top_k``)."""

    dense: FusionDepth | None = None
    lexical: FusionDepth | None = None


class FusionIn(Strict):
    """How the dense and lexical legs are fused; a field left out keeps the tenant's default,
    or the server's setting when the tenant has none. ``rrf``: ``sum w / (rrf_k + rank)``;
    ``convex``: ``sum w * min-max normalised score`` (per leg, per query)."""

    method: Literal["rrf", "convex"] | None = None
    rrf_k: Annotated[int, Field(strict=True, ge=1, le=10_000)] | None = None
    weights: FusionWeightsIn | None = None
    candidates: FusionDepthIn | None = None

    @model_validator(mode="after")
    def _a_leg_counts(self) -> FusionIn:
        if self.weights is not None and self.weights.dense == 0 and self.weights.lexical == 0:
            raise ValueError("at least one fusion weight must be above 0")
        return self


class FusionOut(BaseModel):
    """The fusion an answer used (request over tenant default over settings)."""

    method: Literal["rrf", "convex"]
    rrf_k: int
    weights: dict[str, float]
    candidates: dict[str, int]


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
    top_k: StrictInt
    mode: SearchMode = Field("hybrid", description='"bm25" is accepted as another name for "lexical"')
    filters: FiltersIn = Field(default_factory=FiltersIn)
    rerank: StrictBool | None = None
    max_context_tokens: StrictInt
    expand: Literal["none", "parent"] = "none"
    as_principal: PrincipalId | None = None
    fusion: FusionIn | None = None
    language: QueryLanguage | None = Field(
        None,
        description="the query's language for lexical analysis (ISO 639-1), where the deployment"
        " analyzes text per language (RAGLINE_INDEX__LEXICAL_MULTILINGUAL); otherwise detected, and"
        " short queries fall back to English",
    )


class FeedbackIn(Strict):
    """A judgement of one result of one retrieve: by ``chunk_id`` or by the document's
    ``external_id`` (exactly one). ``label``: ``relevant`` (grade 1), ``not_relevant`` (0) or
    a graded 0-3."""

    request_id: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
    chunk_id: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")] | None = None
    external_id: ExternalId | None = None
    label: Literal["relevant", "not_relevant"] | Annotated[int, Field(strict=True, ge=0, le=3)]
    as_principal: PrincipalId | None = Field(
        default=None,
        description="Whose judgement it is, as on the retrieve it judges: the end user a delegating"
        " key acted for, or (a tenant admin, as in the console's search-as) any principal of the"
        " tenant. Recorded as that principal and checked against what that principal may read.",
    )

    @model_validator(mode="after")
    def _one_target(self) -> FeedbackIn:
        if (self.chunk_id is None) == (self.external_id is None):
            raise ValueError("give exactly one of chunk_id and external_id")
        return self

    @property
    def grade(self) -> int:
        if isinstance(self.label, int):
            return self.label
        return 1 if self.label == "relevant" else 0


class FeedbackOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"feedback_id": 17, "grade": 1, "query_stored": False}]}
    )
    feedback_id: int
    grade: int
    query_stored: bool = Field(description="whether the query text was kept (audit.store_query_text)")


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
    fusion: FusionOut | None = Field(None, description="the fusion this answer used")
    reranker: str | None = Field(
        None,
        description="the reranker that ordered these results (its model folder's name: the tenant's"
        " gated one, else the server's); null when none did",
    )


_CHUNK_EXAMPLE: dict[str, JsonValue] = {
    "chunk_id": "9f2d4c7e1b3a5f60",
    "document_external_id": "runbook-42",
    "title": "PostgreSQL failover",
    "text": "Promote the standby with pg_ctl promote, then repoint the pooler.",
    "page_range": [3, 3],
    "section_path": ["Operations", "Failover"],
    "char_offsets": [1840, 1906],
    "metadata": {"source": "runbooks", "team": "sre"},
}


class ChunkOut(BaseModel):
    """One chunk read by id (``GET /v1/chunks/{id}``), with its document and locators."""

    model_config = ConfigDict(json_schema_extra={"examples": [_CHUNK_EXAMPLE]})
    chunk_id: str
    document_external_id: str
    title: str | None
    text: str
    page_range: tuple[int, int] | None
    section_path: list[str]
    char_offsets: tuple[int, int]
    metadata: dict[str, JsonValue]


class DocumentOut(BaseModel):
    """A document's current text as its leaf chunks in order (``GET /v1/documents/{id}``);
    ``truncated`` when it has more chunks than one answer carries."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "external_id": "runbook-42",
                    "title": "PostgreSQL failover",
                    "metadata": {"source": "runbooks", "team": "sre"},
                    "chunks": [_CHUNK_EXAMPLE],
                    "truncated": False,
                }
            ]
        }
    )
    external_id: str
    title: str | None
    metadata: dict[str, JsonValue]
    chunks: list[ChunkOut]
    truncated: bool


# --- errors -----------------------------------------------------------------------------------


class ValidationIssue(BaseModel):
    loc: list[str]
    msg: str
    type: str


class RejectionOut(BaseModel):
    index: int
    external_id: str | None
    code: str
    message: str


class ErrorDetail(BaseModel):
    code: str
    message: str
    request_id: str
    # Only while tracing is on (README "Tracing"): the OpenTelemetry trace of this request.
    trace_id: str | None = None
    # Only request validation failures (422 invalid_request) list the fields at fault.
    details: list[ValidationIssue] | None = None
    # Only a push whose every document was rejected (422 all_documents_rejected) lists them.
    rejections: list[RejectionOut] | None = None


class ErrorBody(BaseModel):
    """Every error answer: ``{"error": {"code", "message", "request_id"}}``."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "error": {
                        "code": "unauthenticated",
                        "message": "missing bearer token: send 'Authorization: Bearer <api key>'",
                        "request_id": "4f1c2b9e0a7d4c3e8b6a5d2f1e0c9b8a",
                    }
                }
            ]
        }
    )
    error: ErrorDetail


# --- admin, identity and connector state ------------------------------------------------------


class GroupsBody(Strict):
    groups: list[GroupId] = Field(default_factory=list, max_length=10_000)


class LimitsOut(BaseModel):
    """The request limits of this deployment a client must batch within."""

    max_batch_documents: int
    max_body_bytes: int
    max_upload_bytes: int


class MeOut(BaseModel):
    """Who the key is (its tenant and principal), its roles, and the server's limits."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "tenant_id": "acme",
                    "principal_id": "service:fs-connector",
                    "roles": ["ingest"],
                    "limits": {
                        "max_batch_documents": 256,
                        "max_body_bytes": 8388608,
                        "max_upload_bytes": 268435456,
                    },
                }
            ]
        }
    )
    tenant_id: str
    principal_id: str
    roles: list[str]
    limits: LimitsOut


ConnectorName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")]
ItemKey = Annotated[str, StringConstraints(min_length=1, max_length=512), AfterValidator(rules.no_nul)]
Fingerprint = Annotated[str, StringConstraints(min_length=1, max_length=512), AfterValidator(rules.no_nul)]


class ConnectorStateOut(BaseModel):
    """A connector's sync state in the catalog: its cursor and what it last sent, per item.

    ``documents`` maps an external id to the fingerprint the connector recorded when the
    server accepted it; ``groups`` maps a principal to the fingerprint of its group list.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "connector": "fs-share-1c3e9f2a",
                    "tenant_id": "acme",
                    "cursor": "2026-01-05T09:12:03+00:00",
                    "documents": {"handbook.pdf": "sha256:9f2d...|acl:1c3e..."},
                    "groups": {},
                    "updated_at": "2026-01-05T09:12:05.716002+00:00",
                }
            ]
        }
    )
    connector: str
    tenant_id: str
    cursor: str | None
    documents: dict[str, str]
    groups: dict[str, str]
    updated_at: str | None


class ConnectorStateUpdate(Strict):
    """A merge into a connector's state: set or remove item fingerprints, move the cursor.

    Merged, not replaced, so a connector can save after every batch and a crash loses at most
    the batch in flight (which the server deduplicates by content hash when it is re-sent).
    """

    cursor: Annotated[str, StringConstraints(max_length=4096), AfterValidator(rules.no_nul)] | None = None
    set_documents: dict[ItemKey, Fingerprint] = Field(default_factory=dict, max_length=10_000)
    remove_documents: list[ItemKey] = Field(default_factory=list, max_length=10_000)
    set_groups: dict[ItemKey, Fingerprint] = Field(default_factory=dict, max_length=10_000)
    remove_groups: list[ItemKey] = Field(default_factory=list, max_length=10_000)


class ConnectorStateSaved(BaseModel):
    """The state after a merge: its cursor and how many items it now records."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "connector": "fs-share-1c3e9f2a",
                    "cursor": None,
                    "documents": 412,
                    "groups": 0,
                    "updated_at": "2026-01-05T09:12:05.716002+00:00",
                }
            ]
        }
    )
    connector: str
    cursor: str | None
    documents: int
    groups: int
    updated_at: str

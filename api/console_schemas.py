"""Request and response models of the operator console's admin API (``/v1/admin/...``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from api.schemas import FiltersIn, ResultOut, RetrieveOut, Strict

PrincipalId = Annotated[str, StringConstraints(min_length=3, max_length=256)]


class PrincipalView(BaseModel):
    principal_id: str
    groups: list[str]
    known: bool  # whether the catalog has this principal at all


class PlanOut(BaseModel):
    """The filtered-search strategy one shard ran for this filter (retrieve/planner.py)."""

    shard: int
    strategy: str
    allowed: int
    total: int


class DebugResultOut(ResultOut):
    ranks: dict[str, int]  # 1-based: dense, lexical (the lists that had it), fused, rerank
    found_by: list[str]  # the candidate lists that found it


class DebugRetrieveOut(RetrieveOut):
    """``RetrieveOut`` with what the console shows: per-stage ranks, plans, principal, model."""

    results: list[DebugResultOut]  # type: ignore[assignment]
    principal: PrincipalView
    plans: list[PlanOut]
    model: str


class ExplainIn(Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"external_id": "hr-compensation-bands.txt", "as_principal": "user:bob", "query": "pay"}
            ]
        },
    )
    external_id: Annotated[str, StringConstraints(min_length=1, max_length=512)] | None = None
    chunk_id: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None
    as_principal: PrincipalId
    query: Annotated[str, StringConstraints(min_length=1, max_length=4000, strip_whitespace=True)] | None = (
        None
    )
    filters: FiltersIn = Field(default_factory=FiltersIn)

    @model_validator(mode="after")
    def _one_target(self) -> ExplainIn:
        if (self.external_id is None) == (self.chunk_id is None):
            raise ValueError("give exactly one of external_id or chunk_id")
        return self


ExplainReason = Literal[
    "other_tenant",
    "not_found",
    "deleted",
    "superseded",
    "not_in_acl",
    "filtered",
    "not_embedded",
    "no_chunks",
    "in_delta",
    "below_top_k",
]


class ExplainOut(BaseModel):
    """Why a document is (not) returned; ids, versions and ACL entries only, never text."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "visible": False,
                    "reasons": ["not_in_acl"],
                    "rank": None,
                    "granting_groups": ["group:hr"],
                    "granting_principals": [],
                    "filtered_by": [],
                    "principal": {"principal_id": "user:bob", "groups": ["group:eng"], "known": True},
                    "external_id": "hr-compensation-bands.txt",
                    "document_state": "active",
                    "current_version": 1,
                    "chunk_version": None,
                    "superseded_by": None,
                    "public": False,
                    "chunks": 3,
                    "indexed_chunks": 3,
                    "delta_chunks": 0,
                    "index_version": "v-20260105-091203",
                    "searched_top_k": None,
                }
            ]
        }
    )
    visible: bool
    reasons: list[ExplainReason]
    rank: int | None
    granting_groups: list[str]
    granting_principals: list[str]
    filtered_by: list[str]
    principal: PrincipalView
    external_id: str | None
    document_state: str | None
    current_version: int | None
    chunk_version: int | None
    superseded_by: int | None
    public: bool
    chunks: int
    indexed_chunks: int
    delta_chunks: int
    index_version: str
    searched_top_k: int | None  # how deep the query's ranking was searched for ``rank``


class PrincipalOut(BaseModel):
    principal_id: str
    groups: list[str]
    active_keys: int
    created_at: str


Role = Literal["ingest", "query", "admin"]


class KeyOut(BaseModel):
    key_id: str
    principal_id: str
    roles: list[str]
    can_delegate: bool
    name: str | None
    state: Literal["active", "revoked"]
    created_at: str
    last_used_at: str | None
    revoked_at: str | None


class KeyIn(Strict):
    roles: list[Role] = Field(min_length=1, max_length=3)
    principal_id: PrincipalId | None = None
    can_delegate: bool = False
    name: Annotated[str, StringConstraints(max_length=200)] | None = None


class KeyCreatedOut(BaseModel):
    """The new key; ``token`` is the secret, shown this once and never stored."""

    key: KeyOut
    token: str


class AliasOut(BaseModel):
    alias: str
    version_id: str
    previous_version: str | None


class VersionOut(BaseModel):
    version_id: str
    state: str
    aliases: list[str]
    rollback_of: list[str]
    model: str
    dim: int
    shards: int
    kinds: list[str]
    chunks: int
    hidden: int
    hidden_fraction: float
    delta: int
    position: int
    created_at: str
    built_at: str | None
    build_seconds: float | None
    error: str | None


class ServingOut(BaseModel):
    version_id: str
    model: str
    last_swap_error: str | None


class IndexOut(BaseModel):
    versions: list[VersionOut]
    aliases: list[AliasOut]
    serving: ServingOut | None


class SwapIn(Strict):
    version_id: Annotated[str, StringConstraints(min_length=1, max_length=200)]


class SwapOut(BaseModel):
    alias: str
    previous: str | None
    current: str
    serving: str | None  # the version this node serves after the swap


class ShardQualityOut(BaseModel):
    shard: int
    kind: str
    vectors: int
    sampled: int
    k: int
    recall: float | None


class QualityOut(BaseModel):
    """recall@k of each shard's ANN search against exact search over its stored vectors."""

    version_id: str
    k: int
    shards: list[ShardQualityOut]
    min_recall: float | None


class GcKept(BaseModel):
    version_id: str
    reason: str


class GcOut(BaseModel):
    deleted: list[str]
    kept: list[GcKept]
    grace_seconds: int

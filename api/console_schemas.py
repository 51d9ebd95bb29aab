"""Request and response models of the operator console's admin API (``/v1/admin/...``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    StringConstraints,
    create_model,
    model_validator,
)

from api.schemas import FiltersIn, ResultOut, RetrieveOut, Strict
from core.limits import RetrieveLimits
from retrieve.explain import ExplainReason

PrincipalId = Annotated[str, StringConstraints(min_length=3, max_length=256)]


class PrincipalView(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"principal_id": "user:bob", "groups": ["group:eng"], "known": True}]}
    )

    principal_id: str
    groups: list[str]
    known: bool  # whether the catalog has this principal at all


class PlanOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"shard": 0, "strategy": "filtered", "allowed": 1200}]}
    )

    """The filtered-search strategy one shard ran for this filter (retrieve/planner.py). No
    shard total: it counts every tenant's vectors."""

    shard: int
    strategy: str
    allowed: int = Field(description="Vectors of this shard the searched principal may read.")


class DebugResultOut(ResultOut):
    ranks: dict[str, int]  # 1-based: dense, lexical (the lists that had it), fused, rerank
    found_by: list[str]  # the candidate lists that found it


_BASE: dict[str, Any] = RetrieveOut.model_config["json_schema_extra"]["examples"][0]  # type: ignore[index,assignment]
_DEBUG_EXAMPLE = {
    **_BASE,
    "results": [
        {**r, "ranks": {"dense": 1, "lexical": 2, "fused": 1}, "found_by": ["dense", "lexical"]}
        for r in _BASE["results"]
    ],
    "principal": {"principal_id": "user:alice", "groups": ["group:sre"], "known": True},
    "plans": [{"shard": 0, "strategy": "filtered", "allowed": 1200}],
    "model": "bundled:all-MiniLM-L6-v2",
}


class DebugRetrieveOut(RetrieveOut):
    """``RetrieveOut`` with what the console shows: per-stage ranks, plans, principal, model."""

    model_config = ConfigDict(json_schema_extra={"examples": [_DEBUG_EXAMPLE]})

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
    # Bounded per app by ``explain_in_model`` (the deployment's ``api.max_query_chars``).
    query: Annotated[str, StringConstraints(min_length=1, strip_whitespace=True)] | None = None
    filters: FiltersIn = Field(default_factory=FiltersIn)

    @model_validator(mode="after")
    def _one_target(self) -> ExplainIn:
        if (self.external_id is None) == (self.chunk_id is None):
            raise ValueError("give exactly one of external_id or chunk_id")
        return self


def explain_in_model(limits: RetrieveLimits) -> type[ExplainIn]:
    """``ExplainIn`` with this app's query limit, the one ``/v1/retrieve`` has: explain ranks
    the query as a search would."""
    query = Annotated[
        str, StringConstraints(min_length=1, max_length=limits.max_query_chars, strip_whitespace=True)
    ]
    return create_model(
        "ExplainIn",
        __base__=ExplainIn,
        __module__=__name__,
        query=(query | None, None),
    )


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
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "principal_id": "user:bob",
                    "groups": ["group:eng"],
                    "active_keys": 1,
                    "created_at": "2026-01-05T09:12:03+00:00",
                }
            ]
        }
    )

    principal_id: str
    groups: list[str]
    active_keys: int
    created_at: str


Role = Literal["ingest", "query", "admin", "operator"]


class KeyOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "key_id": "3f9a1c2b7d4e",
                    "principal_id": "user:bob",
                    "roles": ["query"],
                    "can_delegate": False,
                    "name": "bob",
                    "state": "active",
                    "created_at": "2026-01-05T09:12:03+00:00",
                    "last_used_at": None,
                    "revoked_at": None,
                }
            ]
        }
    )

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
    roles: list[Role] = Field(min_length=1, max_length=4)
    principal_id: PrincipalId | None = None
    can_delegate: StrictBool = False
    name: Annotated[str, StringConstraints(max_length=200)] | None = None


class KeyCreatedOut(BaseModel):
    """The new key; ``token`` is the secret, shown this once and never stored."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "key": {
                        "key_id": "3f9a1c2b7d4e",
                        "principal_id": "user:bob",
                        "roles": ["query"],
                        "can_delegate": False,
                        "name": "bob",
                        "state": "active",
                        "created_at": "2026-01-05T09:12:03+00:00",
                        "last_used_at": None,
                        "revoked_at": None,
                    },
                    "token": "rl_3f9a1c2b7d4e_...",
                }
            ]
        }
    )

    key: KeyOut
    token: str


class AliasOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"alias": "live", "version_id": "v20260105-091203-ab12cd", "previous_version": None}]
        }
    )

    alias: str
    version_id: str
    previous_version: str | None


class VersionOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "version_id": "v20260105-091203-ab12cd",
                    "state": "ready",
                    "aliases": ["live"],
                    "rollback_of": [],
                    "model": "bundled:all-MiniLM-L6-v2",
                    "dim": 384,
                    "shards": 2,
                    "kinds": ["hnsw", "hnsw"],
                    "chunks": 96420,
                    "hidden": 310,
                    "hidden_fraction": 0.0032,
                    "delta": 42,
                    "position": 18830,
                    "created_at": "2026-01-05T09:12:03+00:00",
                    "built_at": "2026-01-05T09:14:40+00:00",
                    "build_seconds": 151.2,
                    "error": None,
                }
            ]
        }
    )

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
    gate: dict[str, JsonValue] | None = Field(
        None, description="A model migration's gate results (completeness, recall, nDCG, overlap, passed)"
    )


class ServingOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "version_id": "v20260105-091203-ab12cd",
                    "model": "bundled:all-MiniLM-L6-v2",
                    "last_swap_error": None,
                }
            ]
        }
    )

    version_id: str
    model: str
    last_swap_error: str | None


class IndexOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "versions": [VersionOut.model_config["json_schema_extra"]["examples"][0]],  # type: ignore[index]
                    "aliases": [
                        {"alias": "live", "version_id": "v20260105-091203-ab12cd", "previous_version": None}
                    ],
                    "serving": {
                        "version_id": "v20260105-091203-ab12cd",
                        "model": "bundled:all-MiniLM-L6-v2",
                        "last_swap_error": None,
                    },
                }
            ]
        }
    )
    versions: list[VersionOut]
    aliases: list[AliasOut]
    serving: ServingOut | None


class SwapIn(Strict):
    version_id: Annotated[str, StringConstraints(min_length=1, max_length=200)]


class SwapOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "alias": "live",
                    "previous": "v20260105-091203-ab12cd",
                    "current": "v20260106-101500-ef34ab",
                    "serving": "v20260106-101500-ef34ab",
                }
            ]
        }
    )

    alias: str
    previous: str | None
    current: str
    serving: str | None  # the version this node serves after the swap


class ShardQualityOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"shard": 0, "kind": "hnsw", "vectors": 48210, "sampled": 200, "k": 10, "recall": 0.987}
            ]
        }
    )

    shard: int
    kind: str
    vectors: int
    sampled: int
    k: int
    recall: float | None


class QualityOut(BaseModel):
    """recall@k of each shard's ANN search against exact search over its stored vectors."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "version_id": "v20260105-091203-ab12cd",
                    "k": 10,
                    "shards": [
                        {
                            "shard": 0,
                            "kind": "hnsw",
                            "vectors": 48210,
                            "sampled": 200,
                            "k": 10,
                            "recall": 0.987,
                        }
                    ],
                    "min_recall": 0.987,
                }
            ]
        }
    )

    version_id: str
    k: int
    shards: list[ShardQualityOut]
    min_recall: float | None


class GcKept(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"version_id": "v20260105-091203-ab12cd", "reason": "alias live"}]}
    )

    version_id: str
    reason: str


class GcOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "deleted": ["v20260101-080000-0a1b2c"],
                    "kept": [{"version_id": "v20260105-091203-ab12cd", "reason": "alias live"}],
                    "grace_seconds": 3600,
                }
            ]
        }
    )
    deleted: list[str]
    kept: list[GcKept]
    grace_seconds: int

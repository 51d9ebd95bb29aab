"""Request and response models with limits, so bad input gets a 422, never a 500.

The wire models themselves live in ``ragline_client.models``, shared with the Python client
so both validate one definition; this module re-exports them and adds what only the server
has: the limits that settings hold, which reach the request model through
``retrieve_in_model``, built once per app.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, StrictInt, StringConstraints, create_model

from core.limits import RetrieveLimits
from core.settings import MIN_CONTEXT_TOKENS
from ragline_client.models import (
    MIME_TYPES,
    AclEntry,
    AclIn,
    AclUpdate,
    AclView,
    ChunkOut,
    CitationOut,
    ConnectorStateOut,
    ConnectorStateSaved,
    ConnectorStateUpdate,
    ContextOut,
    DegradedStage,
    DocumentAclOut,
    DocumentDeletedOut,
    DocumentIn,
    DocumentOut,
    ExternalId,
    FilterInstant,
    FiltersIn,
    FilterValue,
    FusionIn,
    FusionOut,
    GroupId,
    GroupsBody,
    GroupsOut,
    HealthOut,
    ItemError,
    ItemWarnings,
    JobDocuments,
    JobOut,
    JobThroughput,
    LimitsOut,
    MeOut,
    MetaKey,
    MetaValue,
    MimeType,
    PrincipalId,
    PushResponse,
    PushWarning,
    ReadyChecks,
    ReadyOut,
    Rejection,
    RejectionOut,
    ResultOut,
    RetrieveInBase,
    RetrieveOut,
    SafeText,
    Strict,
)

__all__ = [
    "ChunkOut",
    "DocumentOut",
    "SafeText",
    "RejectionOut",
    "PrincipalId",
    "ItemWarnings",
    "GroupId",
    "FilterInstant",
    "ExternalId",
    "AclEntry",
    "AclIn",
    "AclUpdate",
    "AclView",
    "CitationOut",
    "ConnectorStateOut",
    "ConnectorStateSaved",
    "ConnectorStateUpdate",
    "ContextOut",
    "DegradedStage",
    "DocumentAclOut",
    "DocumentDeletedOut",
    "DocumentIn",
    "FiltersIn",
    "FilterValue",
    "FusionIn",
    "FusionOut",
    "GroupsBody",
    "GroupsOut",
    "HealthOut",
    "ItemError",
    "JobDocuments",
    "JobOut",
    "JobThroughput",
    "LimitsOut",
    "MeOut",
    "MetaKey",
    "MetaValue",
    "MIME_TYPES",
    "MimeType",
    "PushRequest",
    "PushResponse",
    "PushWarning",
    "ReadyChecks",
    "ReadyOut",
    "Rejection",
    "ResultOut",
    "retrieve_in_model",
    "RetrieveInBase",
    "RetrieveLimits",
    "RetrieveOut",
    "Strict",
]


# Any JSON value, documented as a ``DocumentIn``: the route validates each document on its
# own, so a bad one (not even an object) is one rejection and the rest of the batch is kept.
PushedDocument = Annotated[object, PlainValidator(lambda value: value, json_schema_input_type=DocumentIn)]


class PushRequest(Strict):
    PER_ITEM = frozenset({"documents"})
    documents: list[PushedDocument] = Field(min_length=1)


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
        top_k=(StrictInt, Field(limits.default_top_k, ge=1, le=limits.max_top_k)),
        max_context_tokens=(
            StrictInt,
            Field(limits.default_context_tokens, ge=MIN_CONTEXT_TOKENS, le=limits.max_context_tokens),
        ),
    )


class _FromAttributes(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class AliasStatusOut(_FromAttributes):
    alias: str
    version_id: str
    previous_version: str | None


class ShardStatusOut(_FromAttributes):
    shard: int
    kind: str
    vectors: int
    hidden: int = Field(description="Vectors deleted or superseded since the build (masked at query time).")
    hidden_fraction: float


class RunningJobOut(_FromAttributes):
    job_id: str
    tenant_id: str
    kind: str
    state: str
    documents_done: int
    documents_total: int
    started_at: datetime | None


class RebuildOut(_FromAttributes):
    version_id: str
    state: str
    chunk_count: int
    catalog_position: int
    created_at: datetime
    built_at: datetime | None
    error: str | None


class MigrationOut(_FromAttributes):
    number: int
    name: str
    applied_at: datetime


class CapacityOut(_FromAttributes):
    vectors: int
    dim: int
    kind: str
    serve_ram_bytes: int
    swap_extra_bytes: int
    disk_bytes: int
    ram_available_bytes: int | None
    disk_free_bytes: int
    ram_headroom_bytes: int | None = Field(description="Available RAM minus what the next swap needs.")
    disk_headroom_bytes: int = Field(description="Free disk minus one more version.")


class NodeStatusOut(BaseModel):
    """What the answering replica itself serves."""

    serving_version: str
    view_position: int
    lag_positions: int = Field(description="Catalog changes this node has not applied yet.")
    delta_chunks: int
    shards: list[ShardStatusOut]


class StatusOut(_FromAttributes):
    """``GET /v1/admin/status``: the deployment from the catalog, and this replica's view."""

    model_config = ConfigDict(
        from_attributes=True,
        json_schema_extra={
            "examples": [
                {
                    "model": "bundled:all-MiniLM-L6-v2",
                    "alias": "live",
                    "aliases": [{"alias": "live", "version_id": "v-20261201-0800", "previous_version": None}],
                    "live_version": "v-20261201-0800",
                    "shards": [
                        {"shard": 0, "kind": "flat", "vectors": 5120, "hidden": 12, "hidden_fraction": 0.0023}
                    ],
                    "delta_chunks": 40,
                    "catalog_position": 1234,
                    "changes_since_build": 17,
                    "freshness_lag_s": 312.5,
                    "running_jobs": [],
                    "last_rebuild": None,
                    "last_migration": {
                        "number": 3,
                        "name": "audit_retention",
                        "applied_at": "2026-12-01T08:00:00Z",
                    },
                    "capacity": None,
                    "node": None,
                }
            ]
        },
    )

    model: str
    alias: str
    aliases: list[AliasStatusOut]
    live_version: str | None
    shards: list[ShardStatusOut]
    delta_chunks: int
    catalog_position: int
    changes_since_build: int
    freshness_lag_s: float | None = Field(
        description="Age of the oldest catalog change the live version does not hold (served from the delta)."
    )
    running_jobs: list[RunningJobOut]
    last_rebuild: RebuildOut | None
    last_migration: MigrationOut | None
    capacity: CapacityOut | None
    node: NodeStatusOut | None = None
    scope: Literal["deployment", "tenant"] = Field(
        "deployment",
        description="'tenant' for a tenant admin: its own jobs, changes and delta only; no shard"
        " sizes, capacity, last rebuild or node view (they count every tenant's chunks).",
    )

"""Request and response models with limits, so bad input gets a 422, never a 500.

The wire models themselves live in ``ragline_client.models``, shared with the Python client
so both validate one definition; this module re-exports them and adds what only the server
has: the limits that settings hold, which reach the request model through
``retrieve_in_model``, built once per app.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, PlainValidator, StrictInt, StringConstraints, create_model

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

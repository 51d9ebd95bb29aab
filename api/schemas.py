"""Request and response models with limits, so bad input gets a 422, never a 500.

The wire models themselves live in ``ragline_client.models``, shared with the Python client
so both validate one definition; this module re-exports them and adds what only the server
has: the limits that settings hold, which reach the request model through
``retrieve_in_model``, built once per app.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import Field, StringConstraints, create_model

from core.settings import MIN_CONTEXT_TOKENS
from ragline_client.models import (
    MIME_TYPES,
    AclEntry,
    AclIn,
    AclUpdate,
    AclView,
    CitationOut,
    ConnectorStateOut,
    ConnectorStateSaved,
    ConnectorStateUpdate,
    ContextOut,
    DegradedStage,
    DocumentAclOut,
    DocumentDeletedOut,
    DocumentIn,
    FiltersIn,
    FilterValue,
    GroupsBody,
    GroupsOut,
    HealthOut,
    ItemError,
    JobDocuments,
    JobOut,
    JobThroughput,
    LimitsOut,
    MeOut,
    MetaKey,
    MetaValue,
    MimeType,
    PushResponse,
    ReadyChecks,
    ReadyOut,
    Rejection,
    ResultOut,
    RetrieveInBase,
    RetrieveOut,
    Strict,
)

__all__ = [
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


class PushRequest(Strict):
    documents: list[dict] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class RetrieveLimits:
    """The request limits and defaults of ``/v1/retrieve``; the app builds them from settings."""

    max_top_k: int
    default_top_k: int
    max_query_chars: int
    default_context_tokens: int
    max_context_tokens: int


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

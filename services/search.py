"""Searching as a principal, and the audit entry of one answered search.

``POST /v1/retrieve`` and the console's search as anyone (``POST /v1/admin/retrieve``) both
run here: who the search runs as (the key's principal, a delegated one, or for an admin any
principal of its tenant), and the one shape their audit entries share (``retrieve`` and
``admin.retrieve`` in ``catalog.audit.ACTIONS``). The entry names the model that answered,
the one the answer itself names (``RetrieveResult.embedding_model``, the serving version's),
never a configured one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from time import perf_counter
from typing import TYPE_CHECKING, Any

from authz.acl import DocumentFilters, build_acl_filter
from authz.api_keys import validate_principal_id
from authz.principals import CurrentPrincipal, KeyAuthenticator, Principal
from catalog.audit import AuditEvent
from core.context import request_id_var

if TYPE_CHECKING:  # the foundation app (api.observe) imports this without the search stack
    from retrieve.service import RetrieveRequest, RetrieveResult, SearchService


@dataclass(frozen=True, slots=True)
class RetrieveAudit:
    """What the caller knows about one answered search, beyond the result."""

    principal: Principal
    on_behalf_of: str | None
    query: str
    mode: str
    top_k: int
    filters: dict[str, Any]
    catalog_position: int
    latency_s: float
    request_id: str


@dataclass(frozen=True, slots=True)
class Searched:
    """One answered search: the result, whom it ran as, and what its audit entry records."""

    result: RetrieveResult
    current: CurrentPrincipal
    audit: RetrieveAudit


def retrieve_audit(
    principal: Principal,
    on_behalf_of: str | None,
    req: RetrieveRequest,
    filters: dict[str, Any],
    catalog_position: int,
    started: float,
) -> RetrieveAudit:
    """What the audit records of one search; ``filters`` in their wire form (the request's)."""
    return RetrieveAudit(
        principal=principal,
        on_behalf_of=on_behalf_of,
        query=req.query,
        mode=req.mode,
        top_k=req.top_k,
        filters=filters,
        catalog_position=catalog_position,
        latency_s=perf_counter() - started,
        request_id=request_id_var.get(),
    )


def retrieve_event(
    result: RetrieveResult, info: RetrieveAudit, *, store_query_text: bool, action: str = "retrieve"
) -> AuditEvent:
    """The audit entry of one answered search: who asked, as whom, with which filters, which
    chunks came back from which index version, embedded by which model (the answer's)."""
    details: dict[str, Any] = {
        "key_id": info.principal.key_id,
        "on_behalf_of": info.on_behalf_of,
        "mode": info.mode,
        "top_k": info.top_k,
        "filters": info.filters,
        "chunk_ids": [r.detail.chunk_id for r in result.results],
        "index_version": result.index_version,
        "model": result.embedding_model,
        "catalog_position": info.catalog_position,
        "latency_ms": round(info.latency_s * 1000.0, 3),
        "degraded": [d["stage"] for d in result.degraded],
    }
    if store_query_text:
        details["query"] = info.query
    return AuditEvent(
        actor=info.principal.principal_id,
        action=action,
        tenant_id=info.principal.tenant_id,
        target=info.request_id,
        details=details,
        at=datetime.now(UTC),
    )


def retrieve_as(
    search: SearchService,
    auth: KeyAuthenticator,
    principal: Principal,
    *,
    as_principal: str | None,
    req: RetrieveRequest,
    filters: DocumentFilters,
    shown_filters: dict[str, Any],
) -> Searched:
    """``POST /v1/retrieve``: search as the key's principal, or (a delegating key) as
    ``as_principal``, with the principal's groups as of now."""
    started = perf_counter()
    if as_principal is not None:
        current = auth.delegate(principal, validate_principal_id(as_principal))
    else:
        current = auth.with_current_groups(principal)
    acl = build_acl_filter(current.principal, filters)
    result = search.retrieve(req, acl, catalog_position=current.catalog_position)
    info = retrieve_audit(principal, as_principal, req, shown_filters, current.catalog_position, started)
    return Searched(result, current, info)


def acting_as(auth: KeyAuthenticator, admin: Principal, as_principal: str | None) -> CurrentPrincipal:
    """The principal of the admin's tenant the console acts as (the admin itself when None)."""
    target = validate_principal_id(as_principal) if as_principal else admin.principal_id
    return auth.impersonate(admin, target)

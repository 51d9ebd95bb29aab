"""The operator console's diagnostics: search as any principal of the tenant, and "why not?".

Both run as another principal of the admin's tenant (``acting_as``) and leave their audit
entry here: every console search records ``admin.retrieve`` (like a retrieve, whatever
``audit.retrieves`` says); an explanation as someone other than the admin records
``console.explain``. An explanation runs on the serving snapshot caught up to the
principal's catalog position (``SearchService.caught_up``: fail closed), so it describes
exactly what a search by that principal would see.
"""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter
from typing import Any

from psycopg_pool import ConnectionPool

from authz.acl import DocumentFilters, build_acl_filter
from authz.principals import CurrentPrincipal, KeyAuthenticator, Principal
from catalog import audit
from catalog import principals as principals_repo
from catalog.audit import AuditEvent
from retrieve.explain import ExplainReason, Explanation, explain
from retrieve.service import RetrieveRequest, RetrieveResult, SearchService
from services.search import acting_as, retrieve_audit, retrieve_event


@dataclass(frozen=True, slots=True)
class SeenPrincipal:
    """The principal the console acted as: its groups now, and whether the catalog knows it."""

    principal_id: str
    groups: tuple[str, ...]
    known: bool


@dataclass(frozen=True, slots=True)
class ConsoleSearch:
    result: RetrieveResult
    principal: SeenPrincipal


@dataclass(frozen=True, slots=True)
class ConsoleExplanation:
    """An :class:`~retrieve.explain.Explanation` with what the query's ranking added:
    ``below_top_k`` among the reasons, the rank (None: not ranked) and the depth searched."""

    why: Explanation
    reasons: tuple[ExplainReason, ...]
    rank: int | None
    searched_top_k: int | None
    index_version: str
    principal: SeenPrincipal


def search_as(
    pool: ConnectionPool,
    search: SearchService,
    auth: KeyAuthenticator,
    admin: Principal,
    *,
    as_principal: str | None,
    req: RetrieveRequest,
    filters: DocumentFilters,
    shown_filters: dict[str, Any],
    store_query_text: bool,
) -> ConsoleSearch:
    """``POST /v1/admin/retrieve``: search as ``as_principal`` (the admin when None) with
    every stage's diagnostics in the result; audited as ``admin.retrieve`` in every case."""
    started = perf_counter()
    current = acting_as(auth, admin, as_principal)
    acl = build_acl_filter(current.principal, filters)
    result = search.retrieve(req, acl, catalog_position=current.catalog_position)
    info = retrieve_audit(
        admin, current.principal.principal_id, req, shown_filters, current.catalog_position, started
    )
    entry = retrieve_event(result, info, store_query_text=store_query_text, action="admin.retrieve")
    return ConsoleSearch(result, _seen(pool, current, entry))


def explain_as(
    pool: ConnectionPool,
    search: SearchService,
    auth: KeyAuthenticator,
    admin: Principal,
    *,
    as_principal: str,
    external_id: str | None,
    chunk_id: str | None,
    filters: DocumentFilters,
    query: str | None,
    depth: int,
) -> ConsoleExplanation:
    """``POST /v1/admin/explain``: why the document ``external_id`` (or the one holding
    ``chunk_id``) is or is not returned to ``as_principal``; with ``query``, where the real
    ranking puts it in the first ``depth`` results. Never any text."""
    current = acting_as(auth, admin, as_principal)
    acl = build_acl_filter(current.principal, filters)
    snap = search.caught_up(current.catalog_position, purpose="explain")
    with pool.connection() as conn:
        why = explain(
            conn, acl=acl, snapshot=snap, model=snap.model, external_id=external_id, chunk_id=chunk_id
        )
    reasons, rank, searched = list(why.reasons), None, None
    if query and why.visible:
        searched = depth
        req = RetrieveRequest(query=query, top_k=depth, max_context_tokens=0)
        result = search.retrieve(req, acl, catalog_position=current.catalog_position)
        wanted = set(why.chunk_rows)
        rank = next((i for i, r in enumerate(result.results, start=1) if r.detail.row in wanted), None)
        if rank is None:
            reasons.append("below_top_k")
    entry = None
    if current.principal.principal_id != admin.principal_id:
        entry = _acting_entry(admin, current, action="console.explain")
    seen = _seen(pool, current, entry)
    return ConsoleExplanation(why, tuple(reasons), rank, searched, snap.version_id, seen)


def _acting_entry(admin: Principal, current: CurrentPrincipal, *, action: str) -> AuditEvent:
    """The entry of an admin acting as another principal of its tenant through the console."""
    p = current.principal
    return AuditEvent(
        actor=admin.principal_id,
        action=action,
        tenant_id=p.tenant_id,
        target=p.principal_id,
        details={"via": "console"},
    )


def _seen(pool: ConnectionPool, current: CurrentPrincipal, entry: AuditEvent | None) -> SeenPrincipal:
    """The principal acted as, read in the transaction that records ``entry`` (if any)."""
    p = current.principal
    with pool.connection() as conn:
        known = principals_repo.principal_exists(conn, tenant_id=p.tenant_id, principal_id=p.principal_id)
        if entry is not None:
            audit.record(
                conn,
                actor=entry.actor,
                action=entry.action,
                tenant_id=entry.tenant_id,
                target=entry.target,
                details=entry.details,
            )
    return SeenPrincipal(p.principal_id, tuple(p.groups), known)

"""The operator console's admin API: search as any principal with the full diagnostics,
"why not?", principals and keys, index versions (swap, rollback, quality, GC).

Search, explain, principals and keys need a tenant admin key and stay inside its tenant;
index versions are deployment-wide (as in ``ragline index``) and need an operator key
(``authz.roles``). Built per app (``build_router(limits)``) because
the search route validates with the configured request limits.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from time import perf_counter
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from psycopg_pool import ConnectionPool
from starlette.concurrency import run_in_threadpool

from api.console_schemas import (
    AliasOut,
    DebugRetrieveOut,
    ExplainIn,
    ExplainOut,
    GcKept,
    GcOut,
    IndexOut,
    KeyCreatedOut,
    KeyIn,
    KeyOut,
    PrincipalOut,
    PrincipalView,
    QualityOut,
    ServingOut,
    ShardQualityOut,
    SwapIn,
    SwapOut,
    VersionOut,
)
from api.deps import AdminOrOperator, AdminPrincipal, AdmittedAdmin, OperatorPrincipal, PoolDep, SettingsDep
from api.errors import error_responses
from api.observe import RetrieveObserver
from api.routes.retrieve import (
    document_filters,
    response_json,
    retrieve_audit,
    retrieve_request,
    search_service,
)
from api.schemas import RetrieveInBase, RetrieveLimits, retrieve_in_model
from authz.acl import build_acl_filter
from authz.api_keys import create_key, revoke, validate_principal_id
from authz.principals import CurrentPrincipal, KeyAuthenticator, Principal
from authz.roles import check_grant
from catalog import audit
from catalog import indexes as indexes_repo
from catalog import principals as principals_repo
from catalog.audit import AuditEvent
from catalog.principals import KeyRow
from core.errors import NotFoundError, UnavailableError
from index.quality import ShardQuality, version_quality
from jobs import index_admin
from retrieve.explain import explain
from retrieve.service import RetrieveRequest


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _as(request: Request, admin: Principal, as_principal: str | None) -> CurrentPrincipal:
    auth: KeyAuthenticator = request.app.state.auth
    target = validate_principal_id(as_principal) if as_principal else admin.principal_id
    return auth.impersonate(admin, target)


def _view(
    pool: ConnectionPool,
    admin: Principal,
    current: CurrentPrincipal,
    action: str,
    entry: AuditEvent | None = None,
) -> PrincipalView:
    """The principal searched as, and its audit entry: ``entry`` when given (every admin
    search), else ``action`` when an admin acts as someone else."""
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
        elif p.principal_id != admin.principal_id:
            audit.record(
                conn,
                actor=admin.principal_id,
                action=action,
                tenant_id=p.tenant_id,
                target=p.principal_id,
                details={"via": "console"},
            )
    return PrincipalView(principal_id=p.principal_id, groups=list(p.groups), known=known)


def _plans(plans: list[str]) -> list[dict[str, Any]]:
    """``shard3:filtered:120/400`` (StageLog's form) as objects."""
    out = []
    for text in plans:
        shard, strategy, counts = text.split(":", 2)
        allowed, total = counts.split("/")
        out.append(
            {
                "shard": int(shard.removeprefix("shard")),
                "strategy": strategy,
                "allowed": int(allowed),
                "total": int(total),
            }
        )
    return out


def build_router(limits: RetrieveLimits) -> APIRouter:
    router = APIRouter(prefix="/v1/admin", tags=["console"])

    def search_as(
        body: RetrieveInBase, request: Request, admin: AdmittedAdmin, pool: PoolDep
    ) -> JSONResponse:
        """Search as any principal of the tenant (``as_principal``; the admin itself when
        absent) and see every stage: ranks per list, plans, timings, degraded stages. Every
        call is audited (``admin.retrieve``) like a retrieve, whatever ``audit.retrieves`` says."""
        started = perf_counter()
        service = search_service(request)
        current = _as(request, admin, body.as_principal)
        acl = build_acl_filter(current.principal, document_filters(body.filters))
        req = retrieve_request(body)
        result = service.retrieve(req, acl, catalog_position=current.catalog_position)
        info = retrieve_audit(
            admin, current.principal.principal_id, body, req, current.catalog_position, started
        )
        observer: RetrieveObserver = request.app.state.observer
        entry = observer.event(result, info, service.state.model_name, action="admin.retrieve")
        out = response_json(result)
        for item, r in zip(out["results"], result.results, strict=True):
            item["ranks"] = r.stage_ranks
            item["found_by"] = [s for s in ("dense", "lexical") if s in r.stage_ranks]
        out["principal"] = _view(pool, admin, current, "console.search_as", entry).model_dump()
        out["plans"] = _plans(result.plans)
        out["model"] = service.state.model_name
        return JSONResponse(out)

    search_as.__annotations__["body"] = retrieve_in_model(limits)
    router.add_api_route(
        "/retrieve",
        search_as,
        methods=["POST"],
        response_model=DebugRetrieveOut,
        responses=error_responses(401, 403, 429, 413, 422, 503),
    )

    @router.post(
        "/explain", response_model=ExplainOut, responses=error_responses(401, 403, 429, 413, 422, 503)
    )
    def explain_route(body: ExplainIn, request: Request, admin: AdmittedAdmin, pool: PoolDep) -> ExplainOut:
        """Why a document (or chunk) is or is not returned to ``as_principal``: from the
        catalog, the serving index and, with ``query``, the real ranking. Never any text."""
        service = search_service(request)
        current = _as(request, admin, body.as_principal)
        acl = build_acl_filter(current.principal, document_filters(body.filters))
        try:
            service.watcher.catch_up_to(current.catalog_position)
        except Exception as exc:  # no current permission data: no answer rather than a stale one
            raise UnavailableError("permission data is unavailable; refusing to explain") from exc
        snap = service.state.current
        with pool.connection() as conn:
            why = explain(
                conn,
                acl=acl,
                snapshot=snap,
                model=service.state.model_name,
                external_id=body.external_id,
                chunk_id=body.chunk_id,
            )
        reasons, rank, depth = list(why.reasons), None, None
        if body.query and why.visible:
            depth = limits.max_top_k
            req = RetrieveRequest(query=body.query, top_k=depth, max_context_tokens=0)
            result = service.retrieve(req, acl, catalog_position=current.catalog_position)
            wanted = set(why.chunk_rows)
            rank = next((i for i, r in enumerate(result.results, start=1) if r.detail.row in wanted), None)
            if rank is None:
                reasons.append("below_top_k")
        return ExplainOut(
            visible=why.visible,
            reasons=reasons,
            rank=rank,
            granting_groups=list(why.granting_groups),
            granting_principals=list(why.granting_principals),
            filtered_by=list(why.filtered_by),
            principal=_view(pool, admin, current, "console.explain"),
            external_id=why.external_id,
            document_state=why.doc_state,
            current_version=why.current_version,
            chunk_version=why.chunk_version,
            superseded_by=why.superseded_by,
            public=why.public,
            chunks=why.chunks,
            indexed_chunks=why.indexed_chunks,
            delta_chunks=why.delta_chunks,
            index_version=snap.version_id,
            searched_top_k=depth,
        )

    @router.get("/principals", response_model=list[PrincipalOut], responses=error_responses(401, 403, 429))
    def list_principals(admin: AdminPrincipal, pool: PoolDep) -> list[PrincipalOut]:
        """The tenant's principals with their groups (the console's "as principal" list)."""
        with pool.connection() as conn:
            rows = principals_repo.list_principals(conn, tenant_id=admin.tenant_id)
        return [
            PrincipalOut(
                principal_id=r.principal_id,
                groups=list(r.groups),
                active_keys=r.active_keys,
                created_at=r.created_at.isoformat(),
            )
            for r in rows
        ]

    @router.get("/keys", response_model=list[KeyOut], responses=error_responses(401, 403, 429))
    def list_keys(admin: AdminOrOperator, pool: PoolDep) -> list[KeyOut]:
        """The tenant's keys; never a secret nor its hash."""
        with pool.connection() as conn:
            return [_key_out(k) for k in principals_repo.list_keys(conn, tenant_id=admin.tenant_id)]

    @router.post(
        "/keys",
        response_model=KeyCreatedOut,
        status_code=201,
        responses=error_responses(401, 403, 429, 413, 422),
    )
    def create(body: KeyIn, admin: AdminOrOperator, pool: PoolDep) -> KeyCreatedOut:
        """Create a key in the caller's tenant; the token is in this response only. Tenant
        roles need a tenant admin, ``operator`` an operator."""
        check_grant(admin.roles, body.roles)
        principal = validate_principal_id(body.principal_id) if body.principal_id else None
        with pool.connection() as conn:
            key = create_key(
                conn,
                tenant_id=admin.tenant_id,
                roles=list(body.roles),
                principal_id=principal,
                can_delegate=body.can_delegate,
                name=body.name,
                actor=admin.principal_id,
                via="console",
            )
            row = principals_repo.get_key(conn, key_id=key.key_id)
        assert row is not None
        return KeyCreatedOut(key=_key_out(row), token=key.token)

    @router.post(
        "/keys/{key_id}:revoke", response_model=KeyOut, responses=error_responses(401, 403, 429, 404, 422)
    )
    def revoke_route(key_id: str, admin: AdminOrOperator, pool: PoolDep) -> KeyOut:
        """Revoke one of the tenant's keys (an operator key only by an operator); refused
        everywhere within a second."""
        with pool.connection() as conn:
            before = principals_repo.get_key(conn, key_id=key_id)
            if before is None or before.tenant_id != admin.tenant_id:
                raise NotFoundError(f"no active key {key_id} in this tenant")
            check_grant(admin.roles, before.roles)
            done = revoke(
                conn, key_id=key_id, actor=admin.principal_id, tenant_id=admin.tenant_id, via="console"
            )
            row = principals_repo.get_key(conn, key_id=key_id)
        if not done or row is None or row.tenant_id != admin.tenant_id:
            raise NotFoundError(f"no active key {key_id} in this tenant")
        return _key_out(row)

    @router.get("/index", response_model=IndexOut, responses=error_responses(401, 403, 429))
    def index_overview(request: Request, admin: OperatorPrincipal, pool: PoolDep) -> IndexOut:
        """Versions (model, kinds, shards, counts, hidden fraction, delta, position, build
        time) and aliases, and what this node serves."""
        with pool.connection() as conn:
            versions, aliases = index_admin.overview(conn)
        service = getattr(request.app.state, "search", None)
        serving = (
            ServingOut(
                version_id=service.state.current.version_id,
                model=service.state.model_name,
                last_swap_error=service.last_swap_error,
            )
            if service is not None
            else None
        )
        return IndexOut(
            versions=[
                VersionOut(
                    **{
                        k: getattr(v, k)
                        for k in VersionOut.model_fields
                        if k not in ("aliases", "rollback_of", "kinds", "created_at", "built_at", "gate")
                    },
                    aliases=list(v.aliases),
                    rollback_of=list(v.rollback_of),
                    kinds=list(v.kinds),
                    created_at=v.created_at.isoformat(),
                    built_at=_iso(v.built_at),
                    gate=dict(v.gate) if v.gate is not None else None,
                )
                for v in versions
            ],
            aliases=[
                AliasOut(alias=a.alias, version_id=a.version_id, previous_version=a.previous_version)
                for a in aliases
            ],
            serving=serving,
        )

    def _follow(request: Request, alias: str, previous: str | None, current: str) -> SwapOut:
        service = getattr(request.app.state, "search", None)
        serving = None
        if service is not None and service.watcher.alias == alias:
            with request.app.state.pool.connection() as conn:
                service.watcher.check_alias(conn)  # this node follows at once; others on NOTIFY
            serving = service.state.current.version_id
        return SwapOut(alias=alias, previous=previous, current=current, serving=serving)

    @router.post(
        "/index/aliases/{alias}:swap",
        response_model=SwapOut,
        responses=error_responses(401, 403, 429, 404, 409, 413, 422),
    )
    def swap_route(
        alias: str, body: SwapIn, request: Request, admin: OperatorPrincipal, pool: PoolDep
    ) -> SwapOut:
        """Point an alias at a ready version whose files check out."""
        with pool.connection() as conn:
            previous = index_admin.swap(
                conn, alias=alias, version_id=body.version_id, actor=admin.principal_id, via="console"
            )
        return _follow(request, alias, previous, body.version_id)

    @router.post(
        "/index/aliases/{alias}:rollback",
        response_model=SwapOut,
        responses=error_responses(401, 403, 429, 404, 409, 422),
    )
    def rollback_route(alias: str, request: Request, admin: OperatorPrincipal, pool: PoolDep) -> SwapOut:
        """Point an alias back at the version it pointed at before."""
        with pool.connection() as conn:
            previous, current = index_admin.rollback(
                conn, alias=alias, actor=admin.principal_id, via="console"
            )
        return _follow(request, alias, previous, current)

    @router.post(
        "/index/versions/{version_id}:quality",
        response_model=QualityOut,
        responses=error_responses(401, 403, 429, 404, 422),
    )
    async def quality_route(
        version_id: str, admin: OperatorPrincipal, pool: PoolDep, settings: SettingsDep
    ) -> QualityOut:
        """recall@10 of each shard's ANN index against exact search on a sample of its vectors."""
        with pool.connection() as conn:
            row = indexes_repo.get_version(conn, version_id=version_id)
        if row is None or row.state != "ready":
            raise NotFoundError(f"no ready index version {version_id}")
        shards = await run_in_threadpool(
            version_quality,
            Path(row.path),
            sample=settings.console.quality_sample,
            k=10,
            ef_search=settings.index.hnsw_ef_search,
            nprobe=settings.index.ivf_nprobe,
        )
        recalls = [s.recall for s in shards if s.recall is not None]
        return QualityOut(
            version_id=version_id,
            k=10,
            shards=[_shard_out(s) for s in shards],
            min_recall=min(recalls) if recalls else None,
        )

    @router.post("/index:gc", response_model=GcOut, responses=error_responses(401, 403, 429))
    def gc_route(admin: OperatorPrincipal, pool: PoolDep, settings: SettingsDep) -> GcOut:
        """Delete versions no alias uses nor could roll back to, past the grace period."""
        grace = settings.index.gc_grace_seconds
        with pool.connection() as conn:
            report = index_admin.collect_garbage(
                conn, grace_seconds=grace, actor=admin.principal_id, via="console"
            )
        return GcOut(
            deleted=list(report.deleted),
            kept=[GcKept(version_id=v, reason=r) for v, r in report.kept],
            grace_seconds=grace,
        )

    return router


def _shard_out(s: ShardQuality) -> ShardQualityOut:
    return ShardQualityOut(
        shard=s.shard, kind=s.kind, vectors=s.vectors, sampled=s.sampled, k=s.k, recall=s.recall
    )


def _key_out(k: KeyRow) -> KeyOut:
    return KeyOut(
        key_id=k.key_id,
        principal_id=k.principal_id,
        roles=list(k.roles),
        can_delegate=k.can_delegate,
        name=k.name,
        state="revoked" if k.revoked_at else "active",
        created_at=k.created_at.isoformat(),
        last_used_at=_iso(k.last_used_at),
        revoked_at=_iso(k.revoked_at),
    )

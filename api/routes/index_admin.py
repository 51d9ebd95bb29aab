"""Index versions and aliases over HTTP (as ``ragline index``): deployment-wide, for an
operator key."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from api.console_schemas import (
    AliasOut,
    GcKept,
    GcOut,
    IndexOut,
    QualityOut,
    ServingOut,
    ShardQualityOut,
    SwapIn,
    SwapOut,
    VersionOut,
)
from api.deps import OperatorPrincipal, PoolDep, SettingsDep
from api.errors import error_responses
from catalog import indexes as indexes_repo
from core.errors import NotFoundError
from index.quality import ShardQuality, version_quality
from jobs import index_admin

router = APIRouter(prefix="/v1/admin", tags=["console"])


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


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
        previous, current = index_admin.rollback(conn, alias=alias, actor=admin.principal_id, via="console")
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


def _shard_out(s: ShardQuality) -> ShardQualityOut:
    return ShardQualityOut(
        shard=s.shard, kind=s.kind, vectors=s.vectors, sampled=s.sampled, k=s.k, recall=s.recall
    )

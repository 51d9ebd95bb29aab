"""Index versions and aliases over HTTP (as ``ragline index``): deployment-wide, for an
operator key."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
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
from api.deps import OperatorPrincipal, OptionalSearchDep, PoolDep, SettingsDep
from api.errors import error_responses
from authz.principals import Principal
from services import index as index_ops
from services.caller import Caller
from services.index import ShardQuality

router = APIRouter(prefix="/v1/admin", tags=["console"])


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


@router.get("/index", response_model=IndexOut, responses=error_responses(401, 403, 429))
def index_overview(admin: OperatorPrincipal, pool: PoolDep, search: OptionalSearchDep) -> IndexOut:
    """Versions (model, kinds, shards, counts, hidden fraction, delta, position, build
    time) and aliases, and what this node serves."""
    with pool.connection() as conn:
        versions, aliases = index_ops.overview(conn)
    served = index_ops.serving(search)
    serving = (
        ServingOut(version_id=served.version_id, model=served.model, last_swap_error=served.last_swap_error)
        if served is not None
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


@router.post(
    "/index/aliases/{alias}:swap",
    response_model=SwapOut,
    responses=error_responses(401, 403, 429, 404, 409, 413, 422),
)
def swap_route(
    alias: str, body: SwapIn, admin: OperatorPrincipal, pool: PoolDep, search: OptionalSearchDep
) -> SwapOut:
    """Point an alias at a ready version whose files check out."""
    with pool.connection() as conn:
        previous = index_ops.swap(conn, alias=alias, version_id=body.version_id, caller=_console(admin))
    serving = index_ops.follow_alias(search, pool, alias)  # this node at once; others on NOTIFY
    return SwapOut(alias=alias, previous=previous, current=body.version_id, serving=serving)


@router.post(
    "/index/aliases/{alias}:rollback",
    response_model=SwapOut,
    responses=error_responses(401, 403, 429, 404, 409, 422),
)
def rollback_route(alias: str, admin: OperatorPrincipal, pool: PoolDep, search: OptionalSearchDep) -> SwapOut:
    """Point an alias back at the version it pointed at before."""
    with pool.connection() as conn:
        previous, current = index_ops.rollback(conn, alias=alias, caller=_console(admin))
    serving = index_ops.follow_alias(search, pool, alias)
    return SwapOut(alias=alias, previous=previous, current=current, serving=serving)


@router.post(
    "/index/versions/{version_id}:quality",
    response_model=QualityOut,
    responses=error_responses(401, 403, 429, 404, 422),
)
async def quality_route(
    version_id: str, admin: OperatorPrincipal, pool: PoolDep, settings: SettingsDep
) -> QualityOut:
    """recall@10 of each shard's ANN index against exact search on a sample of its vectors."""
    shards = await run_in_threadpool(
        index_ops.version_quality,
        pool,
        version_id,
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
        report = index_ops.collect_garbage(conn, grace_seconds=grace, caller=_console(admin))
    return GcOut(
        deleted=list(report.deleted),
        kept=[GcKept(version_id=v, reason=r) for v, r in report.kept],
        grace_seconds=grace,
    )


def _console(admin: Principal) -> Caller:
    return Caller(admin.principal_id, "console")


def _shard_out(s: ShardQuality) -> ShardQualityOut:
    return ShardQualityOut(
        shard=s.shard, kind=s.kind, vectors=s.vectors, sampled=s.sampled, k=s.k, recall=s.recall
    )

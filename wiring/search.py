"""The search service (query embedder, serving state, searcher, optional reranker)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import psycopg
from psycopg_pool import ConnectionPool

from catalog.warm import prewarm_serving_reads
from core import metrics
from core.settings import Settings
from index.builder import EVERYTHING, ShardSelection
from index.embedder import Embedder
from index.shared_embedders import EmbeddingModels
from index.tokens import CachedTokenCounter
from jobs.shard_servers import ShardFanout, ShardServerConfig, start_shard_servers
from rerank.batching import BatchingReranker
from rerank.cross_encoder import load_reranker
from rerank.models import RerankerModels
from retrieve.hybrid import HybridSearcher, PlannerConfig
from retrieve.query_embedding import QueryEmbedders
from retrieve.rerank_breaker import BreakerConfig, RerankBreakers
from retrieve.service import FusionConfig, RerankConfig, SearchConfig, SearchService
from retrieve.serving import ServingState
from retrieve.watcher import IndexWatcher
from wiring.embedding import query_embedding_spec
from wiring.index import lexical_tokenizer
from wiring.tracing import trace_env, tracing_enabled

log = logging.getLogger(__name__)


def build_search_service(
    settings: Settings,
    pool: ConnectionPool,
    embedder: Embedder | None = None,
    *,
    alias: str = "live",
    watch: bool = True,
    read_pool: ConnectionPool | None = None,
    models: EmbeddingModels | None = None,
) -> tuple[SearchService, Callable[[], None]]:
    """The started search service and its closer; ``embedder`` reuses a loaded model.

    At ``embedding_query_precision=int8`` the queries get their own int8 encoder of the same
    model (``embedder``, fp32, keeps embedding passages wherever the caller uses it).

    ``models`` is the process's shared models (an API server passes its app's, so the ingest
    runner embeds with the same loaded model: one copy in memory, issue 42); without it the
    query encoders are this service's own.
    """
    spec = query_embedding_spec(settings)
    shared = models if models is not None else EmbeddingModels()
    if embedder is None:
        embedder = shared.get(spec)
    elif getattr(embedder, "precision", "fp32") != spec.precision:
        embedder = shared.get(spec.for_model(embedder.model_name))
    r, ix = settings.retrieve, settings.index
    query_embedders = QueryEmbedders(
        embedder,
        lambda model: shared.get(spec.for_model(model)),
        on_batch=metrics.BATCH_SIZE.labels("embed").observe,
    )
    fanout = shard_fanout(settings, pool, dim=embedder.dim, alias=alias)
    state = ServingState(
        model_name=settings.embedding_model,
        dim=embedder.dim,
        tokenizer=lexical_tokenizer(settings),
        prepare_model=query_embedders.prepare,
        # Fanning out, this process keeps the manifest (the version's query model) and the
        # catalog view, and no shard or delta: the shard servers hold those.
        selection=EVERYTHING if fanout is None else ShardSelection.nothing(),
        warm=serving_warmer(r.warm_seconds),
    )
    executor = ThreadPoolExecutor(max_workers=max(2, ix.shards), thread_name_prefix="shard")
    planner = planner_config(settings)
    searcher = HybridSearcher(
        state, planner=planner, pool=executor, stage_timeout_s=r.stage_timeout_ms / 1000
    )
    reranker = build_reranker(settings)
    tenant_rerankers = tenant_reranker_models(settings)
    watcher = IndexWatcher(
        pool,
        state,
        alias=alias,
        poll_seconds=ix.poll_seconds,
        # Fanning out, the API swaps once every shard server holds the version (or refuses).
        before_swap=None if fanout is None else fanout.await_version,
    )
    rr = settings.rerank
    config = SearchConfig(
        fusion_config(settings),
        RerankConfig(rr.candidates, rr.budget_ms, rr.blend, rr.model),
        trace_query_text=settings.audit.store_query_text,
    )
    service = SearchService(
        watcher=watcher,
        read_pool=read_pool or pool,
        searcher=searcher,
        embedders=query_embedders,
        counter=(
            CachedTokenCounter(embedder.token_counter, settings.retrieve.token_count_cache)
            if settings.retrieve.token_count_cache
            else embedder.token_counter
        ),
        config=config,
        reranker=reranker,
        shards=fanout,
        tenant_rerankers=tenant_rerankers,
        breakers=rerank_breakers(settings),
    )
    watcher.start(watch=watch)

    def close() -> None:
        watcher.close()
        query_embedders.close()
        if fanout is not None:
            fanout.close()
        if reranker is not None:
            reranker.close()
        tenant_rerankers.close()
        executor.shutdown(wait=False)

    return service, close


def serving_warmer(budget_s: float) -> Callable[[psycopg.Connection], None] | None:
    """The catalog warm-up a serving node runs as it loads a version, timed into
    ``ragline_serving_warm_seconds`` and one log line; None when ``budget_s`` is 0."""
    if budget_s <= 0:
        return None

    def warm(conn: psycopg.Connection) -> None:
        t = time.perf_counter()
        try:
            result = prewarm_serving_reads(conn, budget_s=budget_s)
        except Exception:
            metrics.SERVING_WARM.labels("none", "error").observe(time.perf_counter() - t)
            raise
        elapsed = time.perf_counter() - t
        outcome = "complete" if result.complete else "deadline"
        metrics.SERVING_WARM.labels(result.method, outcome).observe(elapsed)
        log.info(
            "warmed the catalog for serving with %s: %.1f MB of %.1f MB in %d relations, %.2fs%s",
            result.method,
            result.megabytes,
            result.total_megabytes,
            result.relations,
            elapsed,
            "" if result.complete else f" (stopped at retrieve.warm_seconds={budget_s:g})",
        )
        if result.analyzed:
            log.info("renewed stale planner statistics first: ANALYZE %s", ", ".join(result.analyzed))

    return warm


def planner_config(settings: Settings) -> PlannerConfig:
    """The planner's base search parameters, for in-process searchers and shard servers alike."""
    return PlannerConfig(settings.index.hnsw_ef_search, settings.index.ivf_nprobe)


def shard_server_config(settings: Settings, url: str, *, dim: int, alias: str = "live") -> ShardServerConfig:
    """A shard server's config; ``start_shard_servers`` fills in each server's shard group."""
    return ShardServerConfig(
        conninfo=url,
        alias=alias,
        group=0,
        n_groups=1,
        model_name=settings.embedding_model,
        dim=dim,
        tokenizer=lexical_tokenizer(settings),
        planner=planner_config(settings),
        poll_seconds=settings.index.poll_seconds,
        stage_timeout_s=settings.retrieve.stage_timeout_ms / 1000,
        tracing=tracing_enabled(settings),
        trace_env=trace_env(settings),
    )


def shard_fanout(settings: Settings, pool: ConnectionPool, *, dim: int, alias: str) -> ShardFanout | None:
    """Started shard servers behind a fan-out, or None for in-process serving (the default)."""
    if settings.index.shard_servers == 0:
        return None
    from jobs.ray_runtime import ensure_ray

    info = pool.conninfo
    url = info if isinstance(info, str) else info()
    ensure_ray(address=settings.ray_address, data_dir=settings.data_dir)
    servers = start_shard_servers(
        shard_server_config(settings, url, dim=dim, alias=alias), n_servers=settings.index.shard_servers
    )
    return ShardFanout(
        servers,
        timeout_s=settings.retrieve.stage_timeout_ms / 1000,
        swap_wait_s=settings.index.shard_server_wait_seconds,
    )


def rerank_breakers(settings: Settings) -> RerankBreakers:
    """Each tenant's rerank circuit breaker ([rerank] breaker_timeouts, breaker_cooldown_s),
    its transitions counted in ``ragline_rerank_breaker_transitions_total``."""
    rr = settings.rerank
    return RerankBreakers(
        BreakerConfig(rr.breaker_timeouts, rr.breaker_cooldown_s),
        on_change=lambda state: metrics.RERANK_BREAKER_TRANSITIONS.labels(state).inc(),
    )


def build_reranker(settings: Settings) -> BatchingReranker | None:
    """The cross-encoder behind a micro-batcher, or None when ``rerank.model`` is unset."""
    if not settings.rerank.model:
        return None
    return load_batching_reranker(settings, settings.rerank.model)


def tenant_reranker_models(settings: Settings) -> RerankerModels:
    """Tenants' gated rerankers (``ragline reranker gate``), each loaded on its tenant's first
    request as the server's own is (backend, batcher, budget), ``rerank.tenant_models`` at most."""
    return RerankerModels(
        lambda model: load_batching_reranker(settings, model), capacity=settings.rerank.tenant_models
    )


def load_batching_reranker(settings: Settings, model_path: str) -> BatchingReranker:
    """The cross-encoder at ``model_path`` behind a micro-batcher, as [rerank] says."""
    model = load_reranker(
        model_path,
        device=settings.embedding_device,
        backend=settings.rerank.backend,
        data_dir=settings.data_dir.resolve(),
        threads=settings.rerank.threads,
    )
    return BatchingReranker(
        model,
        max_batch_tokens=settings.rerank.max_batch_tokens,
        max_wait_ms=settings.rerank.max_wait_ms,
        default_timeout_s=settings.rerank.budget_ms / 1000,
        on_batch=metrics.BATCH_SIZE.labels("rerank").observe,
    )


def fusion_config(settings: Settings) -> FusionConfig:
    """The server's fusion defaults ([retrieve] settings), beneath tenants' and requests'."""
    r = settings.retrieve
    return FusionConfig(
        r.rrf_k,
        r.dense_weight,
        r.lexical_weight,
        r.candidates,
        r.fusion_method,
        r.dense_candidates,
        r.lexical_candidates,
    )

"""Service hooks the app factory starts in its lifespan: each returns its closer."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI
from psycopg_pool import ConnectionPool

from core.settings import Settings
from index.embedder import Embedder
from retrieve.service import Scorer, SearchService


def ingest_hook(app: FastAPI, settings: Settings, embedder: Embedder | None = None) -> Callable[[], None]:
    """The background ingestion runner (own embedder, resumes unfinished jobs)."""
    from jobs.commands import make_runner

    runner = make_runner(settings, app.state.database_url, embedder=embedder)
    runner.start(resume=True)
    app.state.runner = runner
    return runner.close


def maintenance_hook(app: FastAPI, settings: Settings) -> Callable[[], None]:
    """Scheduled rebuild/swap/GC (one replica per tick); off when maintenance_seconds is 0."""
    if settings.index.maintenance_seconds <= 0:
        return lambda: None
    from index.commands import rebuild_config
    from jobs.scheduler import MaintenancePolicy, MaintenanceScheduler

    ix = settings.index
    policy = MaintenancePolicy(
        interval_seconds=ix.maintenance_seconds,
        tombstone_ratio=ix.rebuild_tombstone_ratio,
        delta_chunks=ix.rebuild_delta_chunks,
        gc_grace_seconds=ix.gc_grace_seconds,
    )
    scheduler = MaintenanceScheduler(app.state.database_url, rebuild_config(settings), policy)
    scheduler.start()
    return scheduler.close


def search_hook(app: FastAPI, settings: Settings, embedder: Embedder | None = None) -> Callable[[], None]:
    """The search service on ``app.state.search``."""
    service, close = build_search_service(settings, app.state.pool, embedder, read_pool=app.state.read_pool)
    app.state.search = service
    return close


def build_search_service(
    settings: Settings,
    pool: ConnectionPool,
    embedder: Embedder | None = None,
    *,
    alias: str = "live",
    watch: bool = True,
    read_pool: ConnectionPool | None = None,
) -> tuple[SearchService, Callable[[], None]]:
    """Query embedder, serving state, searcher and optional reranker, started."""
    from concurrent.futures import ThreadPoolExecutor

    from index.tokenize import Tokenizer
    from jobs.commands import embedding_spec
    from retrieve.hybrid import HybridSearcher, PlannerConfig
    from retrieve.query_embedding import QueryEmbedder
    from retrieve.service import FusionConfig, RerankConfig, SearchConfig
    from retrieve.serving import ServingState
    from retrieve.watcher import IndexWatcher

    embedder = embedder or embedding_spec(settings, batch_size=32).load()
    r, ix = settings.retrieve, settings.index
    tokenizer = Tokenizer(stem=ix.lexical_stem, stop_words=ix.lexical_stop_words)
    state = ServingState(model_name=settings.embedding_model, dim=embedder.dim, tokenizer=tokenizer)
    executor = ThreadPoolExecutor(max_workers=max(2, ix.shards), thread_name_prefix="shard")
    planner = PlannerConfig(
        r.exact_max_allowed, r.exact_max_fraction, r.overfetch_min_fraction, ix.hnsw_ef_search, ix.ivf_nprobe
    )
    searcher = HybridSearcher(
        state, planner=planner, pool=executor, stage_timeout_s=r.stage_timeout_ms / 1000
    )
    reranker, closers = _reranker(settings)
    query_embedder = QueryEmbedder(embedder)
    watcher = IndexWatcher(pool, state, alias=alias, poll_seconds=ix.poll_seconds)
    service = SearchService(
        watcher=watcher,
        read_pool=read_pool or pool,
        searcher=searcher,
        embedder=query_embedder,
        counter=embedder.token_counter,
        config=SearchConfig(
            FusionConfig(r.rrf_k, r.dense_weight, r.lexical_weight, r.candidates),
            RerankConfig(settings.rerank.candidates, settings.rerank.budget_ms, settings.rerank.blend),
        ),
        reranker=reranker,
    )
    watcher.start(watch=watch)

    def close() -> None:
        watcher.close()
        query_embedder.close()
        for c in closers:
            c()
        executor.shutdown(wait=False)

    return service, close


def _reranker(settings: Settings) -> tuple[Scorer | None, list[Callable[[], None]]]:
    if not settings.rerank.model:
        return None, []
    from rerank.batching import BatchingReranker
    from rerank.cross_encoder import load_reranker

    model = load_reranker(
        settings.rerank.model,
        device=settings.embedding_device,
        backend=settings.rerank.backend,
        data_dir=settings.data_dir.resolve(),
        threads=settings.rerank.threads,
    )
    batching = BatchingReranker(
        model,
        max_batch_tokens=settings.rerank.max_batch_tokens,
        max_wait_ms=settings.rerank.max_wait_ms,
        default_timeout_s=settings.rerank.budget_ms / 1000,
    )
    return batching, [batching.close]

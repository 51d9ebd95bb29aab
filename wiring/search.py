"""The search service (query embedder, serving state, searcher, optional reranker)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from psycopg_pool import ConnectionPool

from core.settings import Settings
from index.embedder import Embedder
from rerank.batching import BatchingReranker
from rerank.cross_encoder import load_reranker
from retrieve.hybrid import HybridSearcher, PlannerConfig
from retrieve.query_embedding import QueryEmbedders
from retrieve.service import FusionConfig, RerankConfig, SearchConfig, SearchService
from retrieve.serving import ServingState
from retrieve.watcher import IndexWatcher
from wiring.embedding import embedding_spec
from wiring.index import lexical_tokenizer


def build_search_service(
    settings: Settings,
    pool: ConnectionPool,
    embedder: Embedder | None = None,
    *,
    alias: str = "live",
    watch: bool = True,
    read_pool: ConnectionPool | None = None,
) -> tuple[SearchService, Callable[[], None]]:
    """The started search service and its closer; ``embedder`` reuses a loaded model."""
    embedder = embedder or embedding_spec(settings, batch_size=32).load()
    r, ix = settings.retrieve, settings.index
    spec = embedding_spec(settings, batch_size=32)
    query_embedders = QueryEmbedders(embedder, lambda model: spec.for_model(model).load())
    state = ServingState(
        model_name=settings.embedding_model,
        dim=embedder.dim,
        tokenizer=lexical_tokenizer(settings),
        prepare_model=query_embedders.prepare,
    )
    executor = ThreadPoolExecutor(max_workers=max(2, ix.shards), thread_name_prefix="shard")
    planner = PlannerConfig(
        r.exact_max_allowed, r.exact_max_fraction, r.overfetch_min_fraction, ix.hnsw_ef_search, ix.ivf_nprobe
    )
    searcher = HybridSearcher(
        state, planner=planner, pool=executor, stage_timeout_s=r.stage_timeout_ms / 1000
    )
    reranker = build_reranker(settings)
    watcher = IndexWatcher(pool, state, alias=alias, poll_seconds=ix.poll_seconds)
    config = SearchConfig(
        FusionConfig(r.rrf_k, r.dense_weight, r.lexical_weight, r.candidates),
        RerankConfig(settings.rerank.candidates, settings.rerank.budget_ms, settings.rerank.blend),
    )
    service = SearchService(
        watcher=watcher,
        read_pool=read_pool or pool,
        searcher=searcher,
        embedders=query_embedders,
        counter=embedder.token_counter,
        config=config,
        reranker=reranker,
    )
    watcher.start(watch=watch)

    def close() -> None:
        watcher.close()
        query_embedders.close()
        if reranker is not None:
            reranker.close()
        executor.shutdown(wait=False)

    return service, close


def build_reranker(settings: Settings) -> BatchingReranker | None:
    """The cross-encoder behind a micro-batcher, or None when ``rerank.model`` is unset."""
    if not settings.rerank.model:
        return None
    model = load_reranker(
        settings.rerank.model,
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
    )

"""``GET /metrics`` (Prometheus text): the recorded metrics plus serving-state gauges.

``MetricsMiddleware`` times every HTTP request by route template and status class.
``StateCollector`` reads the node's state at scrape time (live version per alias, shard
vectors and hidden fractions, delta size, batch queue depths, tenants whose rerank is
suspended, catalog lag, jobs by state), so nothing on the request path updates a gauge.
Under ``--workers > 1`` (``PROMETHEUS_MULTIPROC_DIR`` set) the counters and histograms of
every worker are merged; the state gauges are the scraped worker's own view, which every
worker keeps current the same way.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from fastapi import APIRouter, FastAPI
from fastapi.responses import Response
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from catalog import changes as changes_repo
from catalog import jobs as jobs_repo
from core import metrics

if TYPE_CHECKING:  # the foundation app does not import the search stack
    from api.observe import RetrieveObserver
    from retrieve.service import SearchService
    from retrieve.serving import ServingIndex

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class MetricsMiddleware:
    """Observes each HTTP request's latency by route template, method and status class."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            metrics.HTTP_LATENCY.labels(template, scope["method"], metrics.status_class(status)).observe(
                time.perf_counter() - started
            )


class StateCollector(Collector):
    """Gauges read from ``app.state`` (and two cheap catalog counts) at scrape time.

    Not a route: a Prometheus collector the registry calls with no request, so it reads the
    app's collaborators itself instead of through ``api.deps``."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def collect(self) -> Iterator[Metric]:
        state = self.app.state
        search = getattr(state, "search", None)
        snap = search.serving() if search is not None else None
        if search is not None and snap is not None:
            yield from self._serving(search, snap)
        yield from self._queues(search, getattr(state, "observer", None))
        if search is not None and search.breakers is not None:
            suspended = GaugeMetricFamily(
                "ragline_rerank_suspended_tenants",
                "Tenants whose reranking this node suspends now (rerank breaker open or half-open).",
            )
            suspended.add_metric([], float(search.breakers.suspended()))
            yield suspended
        yield from self._catalog(search)

    def _serving(self, search: SearchService, snap: ServingIndex) -> Iterator[Metric]:
        version = GaugeMetricFamily(
            "ragline_index_version_info",
            "The index version an alias serves on this node.",
            labels=["alias", "version"],
        )
        version.add_metric([search.watcher.alias, snap.version_id], 1.0)
        model = GaugeMetricFamily("ragline_model_info", "The embedding model served.", labels=["model"])
        model.add_metric([snap.model], 1.0)  # the serving version's, as answers name it
        vectors = GaugeMetricFamily("ragline_shard_vectors", "Vectors per shard.", labels=["shard"])
        hidden = GaugeMetricFamily(
            "ragline_shard_hidden_fraction",
            "Fraction of a shard's vectors hidden (deleted or superseded since the build).",
            labels=["shard"],
        )
        for s in search.shard_stats():
            vectors.add_metric([str(s.shard)], float(s.vectors))
            hidden.add_metric([str(s.shard)], s.hidden_fraction)
        delta = GaugeMetricFamily("ragline_delta_chunks", "Chunks in the fresh-writes delta segment.")
        delta.add_metric([], float(snap.delta.size))
        yield from (version, model, vectors, hidden, delta)

    def _queues(self, search: SearchService | None, observer: RetrieveObserver | None) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "ragline_batch_queue_depth", "Items waiting for a micro-batch, by batcher.", labels=["batcher"]
        )
        if search is not None:
            depth.add_metric(["embed"], float(search.embedders.queue_depth))
            rerank_depth = getattr(search.reranker, "queue_depth", None)  # a batching reranker
            if isinstance(rerank_depth, int):
                depth.add_metric(["rerank"], float(rerank_depth))
        yield depth
        audit = observer.audit if observer is not None else None
        if audit is not None:
            queued = GaugeMetricFamily("ragline_audit_queue_depth", "Audit events waiting to be written.")
            queued.add_metric([], float(audit.queue_depth))
            yield queued

    def _catalog(self, search: SearchService | None) -> Iterator[Metric]:
        pool = getattr(self.app.state, "read_pool", None)
        if pool is None:
            return
        try:
            with pool.connection(timeout=2.0) as conn:
                position = changes_repo.current_position(conn)
                by_state = jobs_repo.count_by_state(conn)
        except Exception:  # a scrape must answer even when the database does not
            log.warning("metrics: catalog unavailable", exc_info=True)
            return
        jobs = GaugeMetricFamily(
            "ragline_jobs", "Jobs in the catalog by kind and state.", labels=["kind", "state"]
        )
        for (kind, job_state), n in sorted(by_state.items()):
            jobs.add_metric([kind, job_state], float(n))
        yield jobs
        if search is not None:
            lag = GaugeMetricFamily(
                "ragline_catalog_lag_positions", "Catalog changes this node's view has not applied yet."
            )
            lag.add_metric([], float(max(0, position - search.view_position)))
            yield lag


def metrics_router(app: FastAPI) -> APIRouter:
    """The ``/metrics`` route of ``app`` (its state collector on its own registry)."""
    own = CollectorRegistry(auto_describe=False)
    own.register(StateCollector(app))
    router = APIRouter(tags=["health"])

    @router.get("/metrics", response_class=Response, include_in_schema=False)
    def scrape() -> Response:
        """Prometheus text exposition: the recorded metrics and this node's state gauges."""
        return Response(_exposition() + generate_latest(own), media_type=CONTENT_TYPE)

    return router


def _exposition() -> bytes:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest(REGISTRY)

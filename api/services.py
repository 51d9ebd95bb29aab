"""Service hooks the app factory starts in its lifespan: each puts its service on
``app.state`` and returns its closer. The objects come from the composition root."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI

from api.observe import RetrieveObserver, record_job_outcome
from core.settings import Settings
from index.embedder import Embedder
from index.shared_embedders import EmbeddingModels
from wiring import audit_writer, build_search_service, maintenance_scheduler, make_runner


def embedding_models(app: FastAPI) -> EmbeddingModels:
    """The app's loaded embedding models, made by the first hook that asks.

    The ingest runner and the search service load their model through it, so a server process
    holds one copy of a model both use (issue 42: each used to load its own).
    """
    models: EmbeddingModels | None = getattr(app.state, "embedding_models", None)
    if models is None:  # hooks run one after another in the lifespan: no race here
        models = app.state.embedding_models = EmbeddingModels()
    return models


def ingest_hook(app: FastAPI, settings: Settings, embedder: Embedder | None = None) -> Callable[[], None]:
    """The background ingestion runner (resumes unfinished jobs); ``embedder`` overrides the
    app's shared model (tests inject theirs)."""
    runner = make_runner(settings, app.state.database_url, embedder=embedder, models=embedding_models(app))
    runner.on_finished = record_job_outcome
    runner.start(resume=True)
    app.state.runner = runner
    return runner.close


def maintenance_hook(app: FastAPI, settings: Settings) -> Callable[[], None]:
    """Scheduled rebuild/swap/GC (one replica per tick); off when maintenance_seconds is 0."""
    scheduler = maintenance_scheduler(settings, app.state.database_url)
    if scheduler is None:
        return lambda: None
    scheduler.start()
    return scheduler.close


def search_hook(app: FastAPI, settings: Settings, embedder: Embedder | None = None) -> Callable[[], None]:
    """The search service on ``app.state.search``, its query encoder from the app's shared models."""
    service, close = build_search_service(
        settings,
        app.state.pool,
        embedder,
        read_pool=app.state.read_pool,
        models=embedding_models(app),
    )
    app.state.search = service
    return close


def audit_hook(app: FastAPI, settings: Settings) -> Callable[[], None]:
    """The batch writer of retrieve audits (off when ``audit.retrieves`` is false)."""
    writer = audit_writer(settings, app.state.pool)
    if writer is None:
        return lambda: None
    writer.start()
    observer: RetrieveObserver = app.state.observer
    observer.audit = writer

    def close() -> None:
        observer.audit = None
        writer.close()

    return close


def reembed_hook(app: FastAPI, settings: Settings) -> Callable[[], None]:
    """Runs model migrations started with ``POST /v1/admin/reembed``."""
    from jobs.reembed_job import ReembedWorker

    worker = ReembedWorker(app.state.database_url)
    worker.start()
    app.state.reembed = worker
    return worker.close

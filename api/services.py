"""Service hooks the app factory starts in its lifespan: each puts its service on
``app.state`` and returns its closer. The objects come from the composition root."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI

from api.observe import RetrieveObserver, record_job_outcome
from core.settings import Settings
from index.embedder import Embedder
from wiring import audit_writer, build_search_service, maintenance_scheduler, make_runner


def ingest_hook(app: FastAPI, settings: Settings, embedder: Embedder | None = None) -> Callable[[], None]:
    """The background ingestion runner (own embedder, resumes unfinished jobs)."""
    runner = make_runner(settings, app.state.database_url, embedder=embedder)
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
    """The search service on ``app.state.search``."""
    service, close = build_search_service(settings, app.state.pool, embedder, read_pool=app.state.read_pool)
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

"""The FastAPI application factory.

``create_app(settings)`` builds the app; its lifespan applies migrations, opens the pool and
loads the collaborators (key authenticator, ingestion service, search service) onto
``app.state``. Nothing is built at import time.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import APIRouter, Depends, FastAPI

from api.admission import AdmissionMiddleware, build_gate
from api.deps import checked_parameters
from api.docs import install_docs
from api.errors import APP_ERRORS, error_responses, install_error_handlers
from api.limits import KeyLimiter
from api.metrics import MetricsMiddleware, metrics_router
from api.middleware import RequestContextMiddleware, TracingMiddleware
from api.observe import ChangeVisibilityProbe, ObserveConfig, RetrieveObserver
from api.routes import admin, connectors, feedback, fusion, health
from catalog.db import apply_migrations
from core.heap import freeze_startup_heap, unfreeze_heap
from core.limits import RetrieveLimits
from core.logging import configure_logging
from core.settings import Settings
from wiring.api import (
    admission_limits,
    body_limit,
    key_authenticator,
    key_limits,
    open_api_pools,
    retrieve_limits,
    revocation_listener,
)
from wiring.oidc import jwt_authenticator
from wiring.tracing import configure_tracing

log = logging.getLogger(__name__)

# Services are started by hooks so the foundation does not import heavy packages (torch,
# faiss, ray) it does not need; each hook gets (app, settings) and returns a closer.
ServiceHook = Callable[[FastAPI, Settings], Callable[[], None]]


def create_app(
    settings: Settings, *, database_url: str | None = None, hooks: list[ServiceHook] | None = None
) -> FastAPI:
    """Build the API. ``database_url`` overrides the settings (the CLI resolves the local one)."""
    url = database_url or settings.database_url
    if url is None:
        raise ValueError("create_app needs a database URL (settings.database_url or database_url=)")
    app = FastAPI(
        title="ragline",
        version="0.1.0",
        lifespan=_lifespan(settings, url, hooks if hooks is not None else default_hooks()),
        docs_url=None,
        redoc_url=None,
        responses=error_responses(*APP_ERRORS),
        # Path and query parameters under the text rule of bodies, on every route.
        dependencies=[Depends(checked_parameters)],
        # FastAPI's own OpenTelemetry spans, metrics and logs are off: they would record
        # whenever the process has a provider, whatever ragline's setting, and carry the raw
        # path and query string. Ragline's server span (api.middleware.TracingMiddleware)
        # records the route template and status only.
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
    )
    install_docs(app)
    app.state.settings = settings
    app.state.database_url = url
    install_error_handlers(app)
    app.state.limiter = KeyLimiter(key_limits(settings))
    # The shared gate is entered by the expensive routes' dependencies (api.deps), after the
    # key's own limits; the middleware gives every request its deadline.
    app.state.gate = build_gate(admission_limits(settings))
    _install_middleware(app, settings)
    _include_routers(app, settings)
    return app


def _lifespan(
    settings: Settings, url: str, hooks: list[ServiceHook]
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Start-up and shutdown: migrations, pools, authenticators, the observer, then the hooks."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        configure_logging(settings.log_level)
        apply_migrations(url)
        pools = open_api_pools(settings, url)
        app.state.pool = pools.main
        # Single-statement reads of the query path (groups, catalog position, result details).
        app.state.read_pool = pools.read
        app.state.auth = key_authenticator(settings, pools)
        # Keys revoked through another process (replica, worker, the CLI) leave the cache at once.
        revocations = revocation_listener(url, app.state.auth)
        revocations.start()
        app.state.jwt_auth = jwt_authenticator(settings.oidc)
        if app.state.jwt_auth is not None:
            app.state.jwt_auth.start()  # keys fetched in the background, never on a request
        probe = ChangeVisibilityProbe(app.state.read_pool)
        probe.start()
        app.state.observer = RetrieveObserver(
            ObserveConfig(
                tenant_labels=settings.metrics.tenant_labels,
                store_query_text=settings.audit.store_query_text,
            ),
            probe,
        )
        closers = [hook(app, settings) for hook in hooks]
        if settings.api.freeze_heap:
            freeze_startup_heap()  # models and index out of every later collection's scan
        log.info("ragline API ready")
        try:
            yield
        finally:
            if settings.api.freeze_heap:
                unfreeze_heap()
            for close in reversed(closers):
                close()
            probe.close()
            revocations.close()
            if app.state.jwt_auth is not None:
                app.state.jwt_auth.close()
            pools.close()

    return lifespan


def _install_middleware(app: FastAPI, settings: Settings) -> None:
    """The middleware stack, innermost first: each ``add_middleware`` wraps the ones before."""
    # Inside the request context (the deadline answer carries the request id), outside the routes.
    app.add_middleware(AdmissionMiddleware, limits=admission_limits(settings))
    app.add_middleware(RequestContextMiddleware, limit_for=body_limit(settings))
    if configure_tracing(settings):  # off unless configured: then no span, not even a no-op one
        app.add_middleware(TracingMiddleware)
    if settings.metrics.enabled:
        app.add_middleware(MetricsMiddleware)  # outermost: times the whole request
        app.include_router(metrics_router(app))


def _include_routers(app: FastAPI, settings: Settings) -> None:
    for router in (health.router, admin.router, fusion.router, feedback.router, connectors.router):
        app.include_router(router)
    limits = retrieve_limits(settings)
    for router in extra_routers(limits):
        app.include_router(router)
    if settings.console.enabled:
        from api.routes import console

        app.include_router(console.build_router(limits))


def default_hooks() -> list[ServiceHook]:
    """The services a full server runs; tests pass their own list to keep start-up light."""
    from api.services import audit_hook, ingest_hook, maintenance_hook, reembed_hook, search_hook

    return [audit_hook, ingest_hook, search_hook, maintenance_hook, reembed_hook]


def extra_routers(limits: RetrieveLimits) -> list[APIRouter]:
    from api.routes import documents, fetch, index_admin, jobs, keys, operator, retrieve

    routers = [documents.router, jobs.router, retrieve.build_router(limits), operator.build_router(limits)]
    return [*routers, keys.router, index_admin.router, fetch.router]

"""What the API server is built from: its request limits, its two pools, its key authenticator
and the listener that keeps the authenticator's cache free of revoked keys.

``api.app.create_app`` calls these at app creation and in its lifespan; the limits' types
live in ``core.limits`` so that this package builds them without importing ``api``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from psycopg_pool import ConnectionPool

from authz.principals import KeyAuthenticator
from authz.revocations import RevocationListener
from catalog.db import open_pool
from core.limits import AdmissionLimits, KeyLimits, RetrieveLimits
from core.settings import Settings

UPLOAD_SUFFIX = "documents:upload"  # the one route whose body may be as large as an upload


def retrieve_limits(settings: Settings) -> RetrieveLimits:
    """The request limits of ``/v1/retrieve`` and the console's search."""
    return RetrieveLimits(
        max_top_k=settings.api.max_top_k,
        default_top_k=settings.api.default_top_k,
        max_query_chars=settings.api.max_query_chars,
        default_context_tokens=settings.retrieve.default_context_tokens,
        max_context_tokens=settings.retrieve.max_context_tokens,
    )


def key_limits(settings: Settings) -> KeyLimits:
    """Per-key request limits."""
    lim = settings.limits
    return KeyLimits(
        rate_per_s=lim.rate_per_key, burst=lim.burst_per_key, concurrency=lim.concurrency_per_key
    )


def admission_limits(settings: Settings) -> AdmissionLimits:
    """Admission control of the expensive routes and the request deadline."""
    api = settings.api
    return AdmissionLimits(
        max_inflight=api.max_inflight,
        max_queued=api.max_queued,
        queue_timeout_s=api.queue_timeout_ms / 1000,
        request_timeout_s=api.request_timeout_ms / 1000,
        tenant_weights=dict(settings.admission.tenant_weights),
    )


def body_limit(settings: Settings) -> Callable[[str], int]:
    """A request path's largest body in bytes: the upload limit for uploads, else the body limit."""

    def limit_for(path: str) -> int:  # read per request, as the routes' own limits are
        api = settings.api
        return api.max_upload_bytes if path.endswith(UPLOAD_SUFFIX) else api.max_body_bytes

    return limit_for


@dataclass(frozen=True, slots=True)
class ApiPools:
    """The server's two pools: ``main`` for transactions and the index watcher, ``read`` for
    the query path's single-statement reads (autocommit)."""

    main: ConnectionPool
    read: ConnectionPool

    def close(self) -> None:
        self.read.close()
        self.main.close()


def open_api_pools(settings: Settings, url: str) -> ApiPools:
    """Both pools, their connection waits ending by the request's deadline.

    Only the read pool bounds its statements (at 80% of the deadline, so a stuck read ends in
    a 503 of its own and frees its worker): the main pool also serves the index watcher, whose
    catch-up reads of a large corpus may take longer than any request may.
    """
    deadline_s = settings.api.request_timeout_ms / 1000
    main = open_pool(url, size=settings.db_pool_size, timeout_s=deadline_s)
    read = open_pool(
        url,
        size=settings.db_pool_size,
        name="ragline-read",
        autocommit=True,
        min_size=2,
        timeout_s=deadline_s,
        statement_timeout_ms=settings.api.request_timeout_ms * 4 // 5,
    )
    return ApiPools(main, read)


def key_authenticator(settings: Settings, pools: ApiPools) -> KeyAuthenticator:
    """API keys checked against the catalog, cached ``api.key_cache_seconds``."""
    return KeyAuthenticator(pools.main, read_pool=pools.read, ttl_seconds=settings.api.key_cache_seconds)


def revocation_listener(url: str, auth: KeyAuthenticator) -> RevocationListener:
    """The thread that drops keys revoked through any process from ``auth``'s cache."""
    return RevocationListener(url, auth)

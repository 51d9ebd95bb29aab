"""FastAPI dependencies: ``Annotated`` aliases the routes declare."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from psycopg_pool import ConnectionPool
from starlette.concurrency import run_in_threadpool

from api.admission import FairGate, Shed
from api.limits import KeyLimiter
from authz.principals import KeyAuthenticator, Principal
from core import metrics
from core.context import deadline_var
from core.errors import AuthenticationError, OverloadedError
from core.settings import Settings


def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_pool(request: Request) -> ConnectionPool:
    pool: ConnectionPool = request.app.state.pool
    return pool


# Declares the bearer scheme in /openapi.json (so Swagger UI's "Authorize" sends the key);
# auto_error=False because the 401 is ours, in the shared error body, raised below.
_BEARER = HTTPBearer(
    auto_error=False, scheme_name="ApiKey", description="An API key: `Authorization: Bearer rl_<id>_<secret>`"
)


async def get_principal(
    request: Request, _scheme: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]
) -> AsyncIterator[Principal]:
    """The key's principal, admitted by the key's limits for the rest of the request.

    The principal comes from the TTL cache on the event loop, else is read in a worker
    thread. Async on purpose: a sync dependency costs a thread-pool round trip per request,
    and the common case (a cached key) needs no I/O at all.
    """
    principal = await _authenticate(request)
    limiter: KeyLimiter | None = getattr(request.app.state, "limiter", None)
    if limiter is None:
        yield principal
        return
    with limiter.admit(principal.key_id):
        yield principal


async def _authenticate(request: Request) -> Principal:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError("missing bearer token: send 'Authorization: Bearer <api key>'")
    auth: KeyAuthenticator = request.app.state.auth
    token = token.strip()
    hit = auth.cached(token)
    if hit is not None:
        return hit
    return await run_in_threadpool(auth.authenticate, token)


def _role(role: str) -> Callable[[Principal], Coroutine[Any, Any, Principal]]:
    async def dependency(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
        principal.require(role)
        return principal

    return dependency


def _admitted(role: str) -> Callable[[Request, Principal], AsyncIterator[Principal]]:
    """The role's principal, holding a seat of the shared admission gate for the request.

    A dependency of the role's (so of ``get_principal``): FastAPI runs authentication and the
    key's own limits first, so a key over its rate or concurrency gets its 429 before it takes
    any shared capacity, and the gate queues the request with its tenant's.
    """

    async def dependency(request: Request, principal: Principal) -> AsyncIterator[Principal]:
        gate: FairGate | None = getattr(request.app.state, "gate", None)
        if gate is None:
            yield principal
            return
        route = getattr(request.scope.get("route"), "path", None) or request.url.path
        deadline = deadline_var.get()
        started = time.monotonic()
        try:
            async with gate.slot(principal.tenant_id, None if deadline is None else deadline - started):
                metrics.ADMISSION_WAIT.labels(route, "admitted").observe(time.monotonic() - started)
                yield principal
        except Shed as shed:
            _record_shed(request, route, principal.tenant_id, shed.reason, time.monotonic() - started)
            raise OverloadedError("the server is at capacity, retry shortly") from None

    # Set here, not in the signature: a postponed annotation could not see ``role``.
    dependency.__annotations__["principal"] = Annotated[Principal, Depends(_role(role))]
    return dependency


def _record_shed(request: Request, route: str, tenant: str, reason: str, waited_s: float) -> None:
    metrics.SHED.labels(route, reason).inc()
    metrics.ADMISSION_WAIT.labels(route, reason).observe(waited_s)
    settings: Settings = request.app.state.settings
    if settings.metrics.tenant_labels:
        metrics.SHED_BY_TENANT.labels(tenant, reason).inc()


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
PoolDep = Annotated[ConnectionPool, Depends(get_pool)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
IngestPrincipal = Annotated[Principal, Depends(_role("ingest"))]
QueryPrincipal = Annotated[Principal, Depends(_role("query"))]
AdminPrincipal = Annotated[Principal, Depends(_role("admin"))]
# The expensive routes (retrieve, push, the console's search and explain) take these instead.
AdmittedIngest = Annotated[Principal, Depends(_admitted("ingest"))]
AdmittedQuery = Annotated[Principal, Depends(_admitted("query"))]
AdmittedAdmin = Annotated[Principal, Depends(_admitted("admin"))]

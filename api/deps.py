"""FastAPI dependencies: ``Annotated`` aliases the routes declare."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from psycopg_pool import ConnectionPool
from starlette.concurrency import run_in_threadpool

from api.admission import FairGate, Shed
from api.limits import KeyLimiter
from api.observe import RetrieveObserver
from authz.oidc import JwtAuthenticator
from authz.principals import KeyAuthenticator, Principal
from authz.roles import ADMIN, INGEST, OPERATOR, QUERY, require_any
from core import metrics, validation
from core.context import deadline_var
from core.errors import AuthenticationError, InvalidInputError, OverloadedError, UnavailableError
from core.settings import Settings
from jobs.reembed_job import ReembedWorker
from jobs.runner import IngestRunner
from retrieve.service import SearchService

# The collaborators the app factory and its service hooks build (api.app, api.services)
# reach routes through these typed dependencies only: a route declares ``SearchDep``, a test
# replaces it with ``app.dependency_overrides[get_search]``. This module is the one reader
# of ``app.state``; a service a slim app did not start is a 503, not an AttributeError.


def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_pool(request: Request) -> ConnectionPool:
    pool: ConnectionPool = request.app.state.pool
    return pool


def get_read_pool(request: Request) -> ConnectionPool:
    """The autocommit pool of single-statement reads on the query path."""
    pool: ConnectionPool = request.app.state.read_pool
    return pool


def get_database_url(request: Request) -> str:
    url: str = request.app.state.database_url
    return url


def get_key_auth(request: Request) -> KeyAuthenticator:
    auth: KeyAuthenticator = request.app.state.auth
    return auth


def get_observer(request: Request) -> RetrieveObserver:
    observer: RetrieveObserver = request.app.state.observer
    return observer


def _started(request: Request, name: str, what: str) -> Any:
    service = getattr(request.app.state, name, None)
    if service is None:
        raise UnavailableError(f"{what} is not running on this server")
    return service


def get_search(request: Request) -> SearchService:
    """The search service; 503 where this app runs without one."""
    service: SearchService = _started(request, "search", "the search service")
    return service


def get_optional_search(request: Request) -> SearchService | None:
    """The search service, or None on an app without one (status pages name what is missing)."""
    service: SearchService | None = getattr(request.app.state, "search", None)
    return service


def get_runner(request: Request) -> IngestRunner | None:
    """The ingestion runner, or None where this server runs none (jobs wait for one that does)."""
    runner: IngestRunner | None = getattr(request.app.state, "runner", None)
    return runner


def get_reembed_worker(request: Request) -> ReembedWorker | None:
    """The model-migration worker, or None where this server runs none."""
    worker: ReembedWorker | None = getattr(request.app.state, "reembed", None)
    return worker


# Declares the bearer scheme in /openapi.json (so Swagger UI's "Authorize" sends the key);
# auto_error=False because the 401 is ours, in the shared error body, raised below.
_BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An API key (`Authorization: Bearer rl_<id>_<secret>`) or a configured issuer's OIDC token",
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
    limiter: KeyLimiter | None = getattr(request.app.state, "limiter", None)  # None: a slim test app
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
    token = token.strip()
    jwt_auth: JwtAuthenticator | None = getattr(request.app.state, "jwt_auth", None)
    issuer = jwt_auth.issuer_of(token) if jwt_auth is not None else None
    if jwt_auth is not None and issuer is not None:  # else: an API key, as before
        return await run_in_threadpool(jwt_auth.authenticate, token, issuer)
    auth: KeyAuthenticator = request.app.state.auth
    hit = auth.cached(token)
    if hit is not None:
        return hit
    return await run_in_threadpool(auth.authenticate, token)


def _role(*roles: str) -> Callable[[Principal], Coroutine[Any, Any, Principal]]:
    """A dependency admitting a principal holding any of ``roles`` (``authz.roles`` decides)."""

    async def dependency(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
        require_any(principal.roles, *roles)
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
ReadPoolDep = Annotated[ConnectionPool, Depends(get_read_pool)]
DatabaseUrlDep = Annotated[str, Depends(get_database_url)]
KeyAuthDep = Annotated[KeyAuthenticator, Depends(get_key_auth)]
ObserverDep = Annotated[RetrieveObserver, Depends(get_observer)]
SearchDep = Annotated[SearchService, Depends(get_search)]
OptionalSearchDep = Annotated[SearchService | None, Depends(get_optional_search)]
RunnerDep = Annotated[IngestRunner | None, Depends(get_runner)]
ReembedDep = Annotated[ReembedWorker | None, Depends(get_reembed_worker)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
IngestPrincipal = Annotated[Principal, Depends(_role(INGEST))]
QueryPrincipal = Annotated[Principal, Depends(_role(QUERY))]
# A tenant's admin: its keys, principals, groups, documents and jobs, inside its tenant.
AdminPrincipal = Annotated[Principal, Depends(_role(ADMIN))]
# The deployment operator: index versions, aliases, re-embeds, GC, the deployment status.
OperatorPrincipal = Annotated[Principal, Depends(_role(OPERATOR))]
# Following jobs: a tenant's ingest keys, and an operator its own tenant's (re-embeds).
JobsPrincipal = Annotated[Principal, Depends(_role(INGEST, OPERATOR))]
# Either: routes that answer both, each with what its role may see (status, key creation).
AdminOrOperator = Annotated[Principal, Depends(_role(ADMIN, OPERATOR))]
# The expensive routes (retrieve, push, the console's search and explain) take these instead.
AdmittedIngest = Annotated[Principal, Depends(_admitted(INGEST))]
AdmittedQuery = Annotated[Principal, Depends(_admitted(QUERY))]
AdmittedAdmin = Annotated[Principal, Depends(_admitted(ADMIN))]


async def checked_parameters(request: Request) -> None:
    """Path and query parameters under the text rule of bodies (``Strict``): Unicode text
    without NUL, which PostgreSQL cannot store. Installed on the app, so it runs for every
    route (a NUL in ``/v1/admin/index/versions/{version_id}:quality`` was a 500)."""
    problems = []
    places = [("path", name, value) for name, value in request.path_params.items()]
    places += [("query", name, value) for name, value in request.query_params.multi_items()]
    for where, name, value in places:
        if not isinstance(value, str):
            continue
        try:
            validation.no_nul(value, name)
        except InvalidInputError as exc:
            problems.append({"loc": (where, name), "msg": exc.message, "type": "value_error"})
    if problems:
        raise RequestValidationError(problems)

"""FastAPI dependencies: ``Annotated`` aliases the routes declare."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from psycopg_pool import ConnectionPool
from starlette.concurrency import run_in_threadpool

from api.limits import KeyLimiter
from authz.principals import KeyAuthenticator, Principal
from core import validation
from core.errors import AuthenticationError, InvalidInputError
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


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
PoolDep = Annotated[ConnectionPool, Depends(get_pool)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
IngestPrincipal = Annotated[Principal, Depends(_role("ingest"))]
QueryPrincipal = Annotated[Principal, Depends(_role("query"))]
AdminPrincipal = Annotated[Principal, Depends(_role("admin"))]


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

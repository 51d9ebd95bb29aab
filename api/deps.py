"""FastAPI dependencies: ``Annotated`` aliases the routes declare."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request
from psycopg_pool import ConnectionPool

from authz.principals import KeyAuthenticator, Principal
from core.errors import AuthenticationError
from core.settings import Settings


def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_pool(request: Request) -> ConnectionPool:
    pool: ConnectionPool = request.app.state.pool
    return pool


def get_principal(request: Request) -> Principal:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError("missing bearer token: send 'Authorization: Bearer <api key>'")
    auth: KeyAuthenticator = request.app.state.auth
    return auth.authenticate(token.strip())


def _role(role: str) -> Callable[[Principal], Principal]:
    def dependency(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
        principal.require(role)
        return principal

    return dependency


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
PoolDep = Annotated[ConnectionPool, Depends(get_pool)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
IngestPrincipal = Annotated[Principal, Depends(_role("ingest"))]
QueryPrincipal = Annotated[Principal, Depends(_role("query"))]
AdminPrincipal = Annotated[Principal, Depends(_role("admin"))]

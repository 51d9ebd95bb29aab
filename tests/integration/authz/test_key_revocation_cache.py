"""The key cache against revocations, without an app: a read checks the key in the catalog
whatever the cache holds, a load overtaken by a revocation is not cached, and the listener
drops revoked keys (and, after losing its connection, every key)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from authz.api_keys import create_key
from authz.principals import KeyAuthenticator, Principal
from authz.revocations import APPLICATION_NAME, RevocationListener
from catalog.db import open_pool
from core.errors import AuthenticationError
from services import access
from services.caller import Caller

pytestmark = pytest.mark.integration

OPERATOR = Caller("user:test", "cli")
HEARD_WITHIN_S = 0.5  # well inside the cache's 1 s TTL, which alone bounded a revocation before


@pytest.fixture
def pool(db_url: str) -> Iterator[ConnectionPool]:
    pool = open_pool(db_url, size=2, timeout_s=30.0)
    yield pool
    pool.close()


def _key(db_url: str) -> str:
    with psycopg.connect(db_url) as conn:
        return create_key(conn, tenant_id="acme", roles=["query"], principal_id="user:ann").token


def _revoke(db_url: str, token: str) -> None:
    with psycopg.connect(db_url) as conn:
        access.revoke_key(conn, OPERATOR, access.LOCAL_OPERATOR, key_id=token.split("_")[1])


def _until(done: Callable[[], bool], within_s: float) -> float:
    """Seconds until ``done()``; fails past ``within_s``."""
    started = time.monotonic()
    while not done():
        assert time.monotonic() - started < within_s, f"not within {within_s}s"
        time.sleep(0.005)
    return time.monotonic() - started


def test_a_read_refuses_a_key_the_cache_still_holds(db_url: str, pool: ConnectionPool) -> None:
    auth = KeyAuthenticator(pool, ttl_seconds=1.0)  # no listener: only the catalog can tell
    token = _key(db_url)
    principal = auth.authenticate(token)
    _revoke(db_url, token)
    assert auth.cached(token) == principal
    with pytest.raises(AuthenticationError, match="revoked"):
        auth.with_current_groups(principal)
    with pytest.raises(AuthenticationError, match="revoked"):
        auth.delegate(dataclasses.replace(principal, can_delegate=True), "user:bob")
    assert auth.cached(token) is None  # the refusal also dropped it from the cache
    with pytest.raises(AuthenticationError, match="revoked"):
        auth.authenticate(token)


class _Overtaken(KeyAuthenticator):
    """Fault injection: the revocation commits, and is heard, between the load's read of the
    key and its caching."""

    def __init__(self, pool: ConnectionPool, db_url: str) -> None:
        super().__init__(pool, ttl_seconds=1.0)
        self.db_url = db_url

    def _load(self, token: str) -> Principal:
        principal = super()._load(token)
        _revoke(self.db_url, token)
        self.forget(principal.key_id)
        return principal


def test_a_load_overtaken_by_a_revocation_is_not_cached(db_url: str, pool: ConnectionPool) -> None:
    auth = _Overtaken(pool, db_url)
    token = _key(db_url)
    auth.authenticate(token)  # the request that began before the revocation
    assert auth.cached(token) is None
    with pytest.raises(AuthenticationError, match="revoked"):
        auth.authenticate(token)


def test_the_listener_forgets_a_revoked_key_and_recovers_a_lost_connection(
    db_url: str, pool: ConnectionPool
) -> None:
    auth = KeyAuthenticator(pool, ttl_seconds=1.0)
    listener = RevocationListener(db_url, auth)
    listener.start()
    try:
        assert listener.listening  # from start() on: no revocation after it goes unheard
        revoked, other = _key(db_url), _key(db_url)
        auth.authenticate(revoked), auth.authenticate(other)
        _revoke(db_url, revoked)
        _until(lambda: auth.cached(revoked) is None, HEARD_WITHIN_S)
        assert auth.cached(other) is not None  # only the revoked key was dropped

        with psycopg.connect(db_url, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = %s",
                (APPLICATION_NAME,),
            ).fetchall()
        assert killed
        _until(lambda: not listener.listening, 1.0)
        _until(lambda: listener.listening, 3.0)  # back after its retry (the TTL bounds the gap)
        auth.authenticate(other)
        _revoke(db_url, other)
        _until(lambda: auth.cached(other) is None, HEARD_WITHIN_S)
    finally:
        listener.close()

"""Turning a bearer token into a ``Principal``, through a short-lived cache.

A revoked key leaves the cache three ways, so it is refused without a database round trip
per request: ``forget`` on the process that acknowledges the revocation, before its
response; the revocation's NOTIFY on every other process (``authz.revocations``); and the
TTL (<= 1 s by configuration) if that notification is lost. Reads (search, chunk and
document reads, feedback) also check the key in the statement that reads the caller's
groups, so there a revocation is effective from its acknowledgement on every replica.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from authz import roles as role_rules
from authz.api_keys import hash_token, parse_token, verify_token
from catalog import principals as repo
from core.errors import AuthenticationError, PermissionDeniedError, UnavailableError

_TOUCH_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the key's tenant, identity, groups and roles."""

    tenant_id: str
    principal_id: str
    groups: tuple[str, ...]
    roles: frozenset[str]
    key_id: str
    can_delegate: bool = False
    # Groups an OIDC token asserted (authz.oidc): kept beside the catalog's on every re-read.
    token_groups: tuple[str, ...] = ()

    @property
    def readers(self) -> frozenset[str]:
        """The ACL entries this principal matches: itself and its groups."""
        return frozenset((self.principal_id, *self.groups))

    def require(self, role: str) -> None:
        role_rules.require(self.roles, role)

    @property
    def is_operator(self) -> bool:
        return role_rules.has_role(self.roles, role_rules.OPERATOR)


@dataclass(frozen=True, slots=True)
class CurrentPrincipal:
    """A principal with groups read from the catalog, and the catalog change position read
    in the same statement: searching on a view caught up to ``catalog_position`` honours
    every permission change acknowledged before the groups were read."""

    principal: Principal
    catalog_position: int


class KeyAuthenticator:
    """Resolves tokens to principals with a TTL cache keyed by the token's hash."""

    def __init__(
        self, pool: ConnectionPool, *, read_pool: ConnectionPool | None = None, ttl_seconds: float = 1.0
    ) -> None:
        self._pool = pool
        # Group reads are single statements: an autocommit pool saves BEGIN/COMMIT round trips.
        self._read_pool = read_pool or pool
        self._ttl = min(ttl_seconds, 1.0)
        self._cache: dict[bytes, tuple[float, Principal]] = {}
        self._touched: dict[str, float] = {}
        self._lock = threading.Lock()
        # Bumped by every forget: a load that began before one must not cache what it read
        # (it may have read the key just before the revocation committed).
        self._generation = 0

    def cached(self, token: str) -> Principal | None:
        """The principal for ``token`` from the TTL cache, without touching the database."""
        return self._cached(hash_token(token))

    def _cached(self, digest: bytes) -> Principal | None:
        with self._lock:
            cached = self._cache.get(digest)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        return None

    def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise AuthenticationError("missing bearer token")
        digest = hash_token(token)
        hit = self._cached(digest)
        if hit is not None:
            return hit
        now = time.monotonic()
        generation = self._generation
        principal = self._load(token)
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            if generation == self._generation:
                self._cache[digest] = (now + self._ttl, principal)
        return principal

    def forget(self, key_id: str) -> None:
        """Drop ``key_id`` from the cache: its next request is checked against the catalog."""
        with self._lock:
            self._generation += 1
            for digest in [d for d, (_, p) in self._cache.items() if p.key_id == key_id]:
                del self._cache[digest]

    def forget_all(self) -> None:
        """Drop every cached key (revocations may have been missed)."""
        with self._lock:
            self._generation += 1
            self._cache.clear()

    def _load(self, token: str) -> Principal:
        key_id = parse_token(token)
        if key_id is None:
            raise AuthenticationError("malformed API key")
        with self._pool.connection() as conn:
            row = repo.get_key(conn, key_id=key_id)
            if row is None or not verify_token(token, row.key_hash):
                raise AuthenticationError("unknown API key")
            if row.revoked_at is not None:
                raise AuthenticationError("revoked API key")
            groups = repo.groups_of(conn, tenant_id=row.tenant_id, principal_id=row.principal_id)
            if time.monotonic() - self._touched.get(key_id, -_TOUCH_EVERY_S) >= _TOUCH_EVERY_S:
                repo.touch_key(conn, key_id=key_id)
                self._touched[key_id] = time.monotonic()
        return Principal(
            tenant_id=row.tenant_id,
            principal_id=row.principal_id,
            groups=groups,
            roles=frozenset(row.roles),
            key_id=row.key_id,
            can_delegate=row.can_delegate,
        )

    def with_current_groups(self, principal: Principal) -> CurrentPrincipal:
        """The principal with its groups read now: a group change, and the key's revocation
        (401), are effective on every replica from the response that acknowledged them, not
        after the key cache expires."""
        groups, position = self._groups(principal.tenant_id, principal.principal_id, principal.key_id)
        if principal.token_groups:
            groups = tuple(sorted({*groups, *principal.token_groups}))
        return CurrentPrincipal(dataclasses.replace(principal, groups=groups), position)

    def delegate(self, caller: Principal, as_principal: str) -> CurrentPrincipal:
        """The end user a delegating key acts for, with groups from the catalog."""
        if not caller.can_delegate:
            raise PermissionDeniedError("this key may not act as another principal")
        groups, position = self._groups(caller.tenant_id, as_principal, caller.key_id)
        user = Principal(
            tenant_id=caller.tenant_id,
            principal_id=as_principal,
            groups=groups,
            roles=frozenset({"query"}),
            key_id=caller.key_id,
        )
        return CurrentPrincipal(user, position)

    def impersonate(self, admin: Principal, as_principal: str) -> CurrentPrincipal:
        """Any principal of the admin's tenant, for the operator console's "view as".

        Separate from ``delegate``: it needs the ``admin`` role itself (not delegation), stays
        inside the admin's tenant, and the result can only query.
        """
        if not role_rules.has_role(admin.roles, role_rules.ADMIN):
            raise PermissionDeniedError("only an admin key may search as another principal")
        groups, position = self._groups(admin.tenant_id, as_principal, admin.key_id)
        user = Principal(
            tenant_id=admin.tenant_id,
            principal_id=as_principal,
            groups=groups,
            roles=frozenset({"query"}),
            key_id=admin.key_id,
        )
        return CurrentPrincipal(user, position)

    def _groups(self, tenant_id: str, principal_id: str, key_id: str) -> tuple[tuple[str, ...], int]:
        """Groups and position, refusing a key revoked before this read (on any replica)."""
        try:
            with self._read_pool.connection() as conn:
                state = repo.reader_state(conn, tenant_id=tenant_id, principal_id=principal_id, key_id=key_id)
        except (psycopg.Error, PoolTimeout) as exc:  # no group data: fail closed
            raise UnavailableError("permission data is unavailable; refusing to search") from exc
        if state.key_revoked:
            self.forget(key_id)
            raise AuthenticationError("revoked API key")
        return state.groups, state.position

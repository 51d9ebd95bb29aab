"""End users authenticated by their identity provider: ``Authorization: Bearer <JWT>``.

A token is checked with PyJWT against its issuer's JWKS: the signature with a key the issuer
publishes (asymmetric algorithms only, the algorithm bound to the key's type, never ``none``),
then ``iss``, ``aud``, ``exp`` and ``nbf`` with a small leeway. Its claims give the tenant,
the principal (``user:<sub>``), groups and the issuer's configured roles.

Groups come from the token on every request, joined with the catalog's groups of the
principal when a search reads them (``KeyAuthenticator.with_current_groups``). They are not
written into the catalog: the read path stays write-free, a token issued an hour ago cannot
overwrite a fresher directory sync, and a group the provider removes is gone with the token
that carried it. The counterpart is revocation: a JWT cannot be revoked, so what it grants
lasts until ``exp`` (plus leeway); keep tokens short-lived. Groups synced into the catalog
still change at once.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import jwt

from authz.principals import Principal
from core import validation
from core.errors import AuthenticationError, InvalidInputError, UnavailableError

log = logging.getLogger(__name__)

# The key types each algorithm family verifies with; an ``oct`` (shared secret) key never
# verifies anything, so a public JWKS cannot be turned into an HMAC secret.
_KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}
_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_MAX_JWKS_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class Issuer:
    """One trusted identity provider and how its claims map to a ragline principal."""

    issuer: str
    jwks_url: str
    audience: tuple[str, ...]
    tenant: str | None
    tenant_claim: str | None
    principal_claim: str
    groups_claim: str | None
    roles: frozenset[str]
    algorithms: tuple[str, ...]


class Jwks:
    """An issuer's published keys: fetched with a bounded timeout and cached ``cache_s``; an
    unknown ``kid`` (a rotation) refetches them. Fetch attempts, failed ones included, are at
    least ``min_refresh_s`` apart, so neither forged kids nor a dead provider turn requests
    into fetches (or into a queue of timeouts)."""

    def __init__(self, url: str, *, timeout_s: float, cache_s: float, min_refresh_s: float) -> None:
        self._url = url
        self._timeout = httpx.Timeout(timeout_s)
        self._cache_s = cache_s
        self._min_refresh_s = min_refresh_s
        self._keys: dict[str | None, dict[str, Any]] = {}
        self._fetched_at: float | None = None
        self._tried_at: float | None = None
        self._lock = threading.Lock()

    def key(self, kid: str | None) -> dict[str, Any]:
        with self._lock:  # one fetch at a time: concurrent misses wait for it
            now = time.monotonic()
            stale = self._fetched_at is None or now - self._fetched_at >= self._cache_s
            may_fetch = self._tried_at is None or now - self._tried_at >= self._min_refresh_s
            if (stale or self._find(kid) is None) and may_fetch:
                self._refresh(now)
            if not self._keys:
                raise UnavailableError("the identity provider's keys are unavailable")
            found = self._find(kid)
        if found is None:
            raise AuthenticationError("token signed with a key its issuer does not publish")
        return found

    def _find(self, kid: str | None) -> dict[str, Any] | None:
        found = self._keys.get(kid)
        if found is None and kid is None and len(self._keys) == 1:
            found = next(iter(self._keys.values()))
        return found

    def _refresh(self, now: float) -> None:
        self._tried_at = now
        try:
            keys = self._fetch()
        except (httpx.HTTPError, ValueError) as exc:
            # Cached keys stay in use; with none, the caller answers 503.
            log.warning("JWKS fetch from %s failed: %s", self._url, exc)
            return
        self._keys, self._fetched_at = keys, now

    def _fetch(self) -> dict[str | None, dict[str, Any]]:
        with httpx.stream("GET", self._url, timeout=self._timeout, follow_redirects=False) as response:
            response.raise_for_status()
            body = b""
            for part in response.iter_bytes():
                body += part
                if len(body) > _MAX_JWKS_BYTES:
                    raise ValueError("JWKS document too large")
        data = httpx.Response(200, content=body).json()
        if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
            raise ValueError("not a JWKS document")
        public = set(_KEY_TYPES.values())
        keys = {k.get("kid"): k for k in data["keys"] if isinstance(k, dict) and k.get("kty") in public}
        if not keys:
            raise ValueError("JWKS has no usable public key")
        return keys


class JwtAuthenticator:
    """Verifies JWTs of the configured issuers; ``issuer_of`` says whether a bearer is one."""

    def __init__(
        self,
        issuers: Sequence[Issuer],
        *,
        leeway_s: float,
        timeout_s: float,
        cache_s: float,
        min_refresh_s: float,
    ) -> None:
        self._issuers = {i.issuer: i for i in issuers}
        self._jwks = {
            i.issuer: Jwks(i.jwks_url, timeout_s=timeout_s, cache_s=cache_s, min_refresh_s=min_refresh_s)
            for i in issuers
        }
        self._leeway = leeway_s

    def issuer_of(self, token: str) -> Issuer | None:
        """The configured issuer a bearer names if it is a JWT (unverified: only to choose
        how to check it); None for anything else, which is then an API key."""
        if token.count(".") != 2:
            return None
        try:
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            return None
        iss = claims.get("iss")
        return self._issuers.get(iss) if isinstance(iss, str) else None

    def authenticate(self, token: str, issuer: Issuer) -> Principal:
        claims = self._verify(token, issuer)
        try:
            return _principal(claims, issuer)
        except InvalidInputError as exc:
            raise AuthenticationError(f"token claims do not name a principal: {exc}") from exc

    def _verify(self, token: str, issuer: Issuer) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
            alg = header.get("alg")
            if alg not in issuer.algorithms:
                raise AuthenticationError(f"token algorithm {alg!r} is not allowed for its issuer")
            jwk = self._jwks[issuer.issuer].key(header.get("kid"))
            if jwk.get("kty") != _KEY_TYPES.get(str(alg)[:2]) or jwk.get("alg", alg) != alg:
                raise AuthenticationError("token algorithm does not match its signing key")
            key = jwt.PyJWK(jwk, algorithm=alg)
            return jwt.decode(
                token,
                key=key,
                algorithms=[alg],
                audience=list(issuer.audience),
                issuer=issuer.issuer,
                leeway=self._leeway,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise AuthenticationError("token expired") from exc
        except jwt.PyJWTError as exc:
            raise AuthenticationError(f"invalid token: {exc}") from exc


def _principal(claims: Mapping[str, Any], issuer: Issuer) -> Principal:
    tenant = issuer.tenant or claims.get(issuer.tenant_claim or "")
    if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
        raise InvalidInputError(f"claim {issuer.tenant_claim!r} is not a tenant id")
    subject = claims.get(issuer.principal_claim)
    if not isinstance(subject, str | int) or isinstance(subject, bool):
        raise InvalidInputError(f"claim {issuer.principal_claim!r} is missing")
    principal = validation.principal_id(f"user:{subject}")
    groups = _groups(claims, issuer.groups_claim)
    return Principal(
        tenant_id=tenant,
        principal_id=principal,
        groups=groups,
        roles=issuer.roles,
        # Limits and audit count per end user of the issuer.
        key_id="oidc:" + hashlib.sha256(f"{issuer.issuer}\0{tenant}\0{principal}".encode()).hexdigest()[:12],
        token_groups=groups,
    )


def _groups(claims: Mapping[str, Any], claim: str | None) -> tuple[str, ...]:
    """``group:<name>`` for each value of the claim; values that cannot be a group are
    dropped (fewer groups only ever grant less)."""
    raw = claims.get(claim) if claim else None
    values = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    groups = []
    for value in values:
        if not isinstance(value, str):
            continue
        name = value if value.startswith("group:") else f"group:{value}"
        try:
            groups.append(validation.group_id(name))
        except InvalidInputError:
            log.warning("dropped a group claim value that is not a group id")
    return tuple(sorted(set(groups)))

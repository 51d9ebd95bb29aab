"""End users authenticated by their identity provider: ``Authorization: Bearer <JWT>``.

A token is checked with PyJWT against its issuer's JWKS: the signature with a key the issuer
publishes (asymmetric algorithms only, the algorithm bound to the key's type, never ``none``),
then ``iss``, ``aud``, ``exp`` and ``nbf`` with a small leeway. Its claims give the tenant,
the principal, groups and the issuer's configured roles.

Principals and groups are the issuer's own: ``user:<namespace>:<sub>`` and
``group:<namespace>:<name>``. The ``:`` after the namespace keeps them apart from every API
key's principal (a key's id has none) and the namespace from every other issuer's, so a
partner provider's ``alice`` is not the ``alice`` of the company directory, nor an
administrator key's ``user:alice``. An operator maps an issuer onto the shared names
(``user:<sub>``, ``group:<name>``) only explicitly (``map_subjects``, ``map_groups``), for
the provider that is the directory of record of those users.

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
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import jwt

from authz.jwks import KEY_TYPES, Jwks, JwksRefresher
from authz.principals import Principal
from core import validation
from core.errors import AuthenticationError, InvalidInputError

log = logging.getLogger(__name__)

_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_SUBJECT = re.compile(r"[A-Za-z0-9_.@+-]{1,200}")


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
    # Principals ``user:<namespace>:<sub>`` and groups ``group:<namespace>:<name>``, unless
    # mapped: then ``user:<sub>`` and ``group:<name>``, the names keys and the catalog use.
    namespace: str
    map_subjects: bool = False
    map_groups: bool = False


class JwtAuthenticator:
    """Verifies JWTs of the configured issuers; ``issuer_of`` says whether a bearer is one.
    ``start()`` begins fetching keys in the background (``authz.jwks``), ``close()`` stops."""

    def __init__(
        self,
        issuers: Sequence[Issuer],
        *,
        leeway_s: float,
        timeout_s: float,
        cache_s: float,
        min_refresh_s: float,
        wait_s: float = 0.5,
    ) -> None:
        self._issuers = {i.issuer: i for i in issuers}
        # One worker per issuer: each has at most one fetch in flight, none waits on another's.
        self._executor = ThreadPoolExecutor(max_workers=max(1, len(issuers)), thread_name_prefix="jwks")
        self._jwks = {
            i.issuer: Jwks(
                i.jwks_url,
                self._executor,
                timeout_s=timeout_s,
                cache_s=cache_s,
                min_refresh_s=min_refresh_s,
                wait_s=wait_s,
            )
            for i in issuers
        }
        self._refresher = JwksRefresher(list(self._jwks.values()), settle_s=wait_s)
        self._leeway = leeway_s

    def start(self) -> None:
        self._refresher.start()

    def close(self) -> None:
        self._refresher.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

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
            if jwk.get("kty") != KEY_TYPES.get(str(alg)[:2]) or jwk.get("alg", alg) != alg:
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
    if not _SUBJECT.fullmatch(str(subject)):
        raise InvalidInputError(f"claim {issuer.principal_claim!r} cannot be a principal id")
    space = "" if issuer.map_subjects else f"{issuer.namespace}:"
    principal = validation.principal_id(f"user:{space}{subject}")
    groups = _groups(claims, issuer.groups_claim, None if issuer.map_groups else issuer.namespace)
    return Principal(
        tenant_id=tenant,
        principal_id=principal,
        groups=groups,
        roles=issuer.roles,
        # Limits and audit count per end user of the issuer.
        key_id="oidc:" + hashlib.sha256(f"{issuer.issuer}\0{tenant}\0{principal}".encode()).hexdigest()[:12],
        token_groups=groups,
    )


def _groups(claims: Mapping[str, Any], claim: str | None, namespace: str | None) -> tuple[str, ...]:
    """``group:<namespace>:<name>`` (``group:<name>`` without a namespace) for each value of
    the claim, a leading ``group:`` in the value ignored; values that cannot be a group are
    dropped (fewer groups only ever grant less)."""
    raw = claims.get(claim) if claim else None
    values = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    space = f"{namespace}:" if namespace else ""
    groups = []
    for value in values:
        if not isinstance(value, str):
            continue
        bare = value.removeprefix("group:")
        if not bare:
            continue
        name = f"group:{space}{bare}"
        try:
            groups.append(validation.group_id(name))
        except InvalidInputError:
            log.warning("dropped a group claim value that is not a group id")
    return tuple(sorted(set(groups)))

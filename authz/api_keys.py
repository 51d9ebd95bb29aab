"""API keys: ``rl_<key_id>_<secret>``. Only SHA-256 of the whole key is stored.

Keys carry 256 bits of randomness, so a fast hash is enough (as for GitHub or Stripe
tokens); a slow password hash would cost every request without adding security.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

import psycopg

from authz.roles import ROLES
from catalog import principals as repo
from core import validation
from core.errors import InvalidInputError

_KEY_RE = re.compile(r"rl_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")


@dataclass(frozen=True, slots=True)
class NewKey:
    """A freshly created key. ``token`` is shown once and never stored."""

    key_id: str
    token: str
    tenant_id: str
    principal_id: str
    roles: tuple[str, ...]
    can_delegate: bool


def hash_token(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def parse_token(token: str) -> str | None:
    """The key id of a well-formed token, else None."""
    match = _KEY_RE.fullmatch(token)
    return match.group(1) if match else None


def verify_token(token: str, stored_hash: bytes) -> bool:
    return hmac.compare_digest(hash_token(token), stored_hash)


def validate_principal_id(principal_id: str) -> str:
    """``principal_id`` if it is ``user:<id>``, ``service:<id>`` or an identity provider's
    ``user:<issuer>:<id>`` (full match: no newline)."""
    return validation.principal_id(principal_id)


def create_key(
    conn: psycopg.Connection,
    *,
    tenant_id: str,
    roles: list[str],
    principal_id: str | None = None,
    can_delegate: bool = False,
    name: str | None = None,
) -> NewKey:
    """Store a new key in the caller's transaction; the plaintext exists only in the result.

    The key alone, unaudited: an operation that hands out a key (``ragline keys create``,
    the console) goes through ``services.access.create_key``, which checks the grant and
    writes the audit entry; this is also the seed for tests and benchmarks.
    """
    bad = [r for r in roles if r not in ROLES]
    if bad or not roles:
        raise InvalidInputError(f"roles must be a non-empty subset of {ROLES}, got {roles}")
    # Never an identity provider's user: a key cannot become one issuer's subject.
    principal = validation.key_principal_id(principal_id or f"service:{tenant_id}-{roles[0]}")
    key_id = secrets.token_hex(6)
    token = f"rl_{key_id}_{secrets.token_urlsafe(32)}"
    granted = sorted(set(roles))
    repo.insert_key(
        conn,
        key_id=key_id,
        tenant_id=tenant_id,
        principal_id=principal,
        key_hash=hash_token(token),
        roles=granted,
        can_delegate=can_delegate,
        name=name,
    )
    return NewKey(key_id, token, tenant_id, principal, tuple(granted), can_delegate)


def revoke(conn: psycopg.Connection, *, key_id: str, tenant_id: str | None = None) -> bool:
    """Revoke an active key, unaudited (``services.access.revoke_key`` is the audited
    operation); with ``tenant_id``, only one of that tenant's. False if none matched."""
    return repo.revoke_key(conn, key_id=key_id, tenant_id=tenant_id)

"""Who may do what: API keys, principals and their groups, and reading a chunk or document
as a principal.

``ragline keys create|revoke|list`` and the console's ``/v1/admin/keys`` routes call the same
functions here, so a key made either way is checked, stored and audited alike (only the
entry's ``via`` differs). What a caller may grant or revoke is its :class:`Authority`: a key's
principal is confined to its tenant and to the roles it could use itself
(:func:`authz.roles.check_grant`); the local operator at the CLI reaches every tenant and
every role.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from authz import api_keys
from authz import roles as role_rules
from authz.principals import KeyAuthenticator, Principal
from authz.roles import ROLES, check_grant
from catalog import audit, serving
from catalog import principals as repo
from catalog.principals import KeyRow, PrincipalRow
from catalog.serving import ChunkDetail
from core import validation
from core.errors import NotFoundError, PermissionDeniedError
from services.caller import Caller

__all__ = [
    "LOCAL_OPERATOR",
    "Authority",
    "ChunkDetail",
    "IssuedKey",
    "KeyRow",
    "PrincipalRow",
    "authority_of",
    "create_key",
    "list_keys",
    "list_principals",
    "readable_chunk",
    "readable_document_chunks",
    "reader_for",
    "revoke_key",
    "sync_groups",
]


@dataclass(frozen=True, slots=True)
class Authority:
    """What a caller may hand out or take back: keys with ``roles`` it holds (as
    :func:`authz.roles.check_grant` reads them), in ``tenant_id`` only (None: every tenant)."""

    roles: frozenset[str]
    tenant_id: str | None


# The operator at a shell on the deployment: it reaches the catalog itself, so it may do
# anything a key could (``ragline keys create --role operator`` makes the first operator key).
LOCAL_OPERATOR = Authority(frozenset(ROLES), None)


def authority_of(principal: Principal) -> Authority:
    """A key's authority: its own roles, inside its own tenant."""
    return Authority(principal.roles, principal.tenant_id)


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """A new key's row and its token; the token exists only here, never in the catalog."""

    key: KeyRow
    token: str


def create_key(
    conn: psycopg.Connection,
    caller: Caller,
    authority: Authority,
    *,
    tenant_id: str,
    roles: Sequence[str],
    principal_id: str | None = None,
    can_delegate: bool = False,
    name: str | None = None,
) -> IssuedKey:
    """Create a key in ``tenant_id`` for ``principal_id`` (default ``service:<tenant>-<role>``)
    and audit it, in one transaction.

    Raises:
        PermissionDeniedError: the authority may not grant one of ``roles``, or not in this tenant.
        InvalidInputError: no roles, an unknown role, or a malformed principal id.
    """
    _confine(authority, tenant_id)
    check_grant(authority.roles, roles)
    principal = validation.key_principal_id(principal_id) if principal_id else None
    with conn.transaction():
        new = api_keys.create_key(
            conn,
            tenant_id=tenant_id,
            roles=list(roles),
            principal_id=principal,
            can_delegate=can_delegate,
            name=name,
        )
        audit.record(
            conn,
            actor=caller.actor,
            action="api_key.create",
            tenant_id=tenant_id,
            target=new.key_id,
            details={
                "roles": list(new.roles),
                "principal": new.principal_id,
                "delegate": new.can_delegate,
                "via": caller.via,
            },
        )
        row = repo.get_key(conn, key_id=new.key_id)
    if row is None:  # inserted above in this transaction
        raise NotFoundError(f"key {new.key_id} vanished")
    return IssuedKey(row, new.token)


def revoke_key(conn: psycopg.Connection, caller: Caller, authority: Authority, *, key_id: str) -> KeyRow:
    """Revoke an active key inside the authority's tenant and audit it. Returns the revoked row.

    The commit notifies every API process, which drops the key from its cache on hearing it
    (``authz.revocations``); reads check the key in the catalog anyway. A caller that holds a
    ``KeyAuthenticator`` (the console route) forgets the key itself before it answers.

    Raises:
        NotFoundError: no active key ``key_id`` in reach (another tenant's looks absent).
        PermissionDeniedError: the key holds a role the authority could not grant.
    """
    absent = NotFoundError(
        f"no active key {key_id}" + (" in this tenant" if authority.tenant_id is not None else "")
    )
    with conn.transaction():
        before = repo.get_key(conn, key_id=key_id)
        if before is None or not _reaches(authority, before.tenant_id):
            raise absent
        check_grant(authority.roles, before.roles)
        if not repo.revoke_key(conn, key_id=key_id, tenant_id=authority.tenant_id):
            raise absent
        audit.record(
            conn,
            actor=caller.actor,
            action="api_key.revoke",
            tenant_id=before.tenant_id,
            target=key_id,
            details={"via": caller.via},
        )
        row = repo.get_key(conn, key_id=key_id)
    if row is None:
        raise absent
    return row


def tokens_valid(conn: psycopg.Connection, tokens: Sequence[str]) -> bool:
    """Whether every token names an active key whose secret it holds (``ragline run`` reusing
    the dev keys of an earlier run)."""
    for token in tokens:
        row = repo.get_key(conn, key_id=api_keys.parse_token(token) or "")
        if row is None or row.revoked_at is not None or row.key_hash != api_keys.hash_token(token):
            return False
    return True


def list_keys(conn: psycopg.Connection, *, tenant_id: str | None) -> list[KeyRow]:
    """The keys of ``tenant_id`` (None: every tenant's), oldest first; rows carry the hash,
    which no adapter renders."""
    return repo.list_keys(conn, tenant_id=tenant_id)


def list_principals(conn: psycopg.Connection, *, tenant_id: str) -> list[PrincipalRow]:
    """The tenant's principals with their groups and active key counts."""
    return repo.list_principals(conn, tenant_id=tenant_id)


def sync_groups(
    conn: psycopg.Connection, caller: Caller, *, tenant_id: str, principal_id: str, groups: Sequence[str]
) -> list[str]:
    """Replace a principal's groups in ``tenant_id`` and audit it; effective for retrieval
    from the commit on (searches read groups per request). Returns the groups, sorted.

    Raises:
        InvalidInputError: a malformed principal id.
    """
    validation.principal_id(principal_id)
    members = sorted(set(groups))
    with conn.transaction():
        repo.replace_groups(conn, tenant_id=tenant_id, principal_id=principal_id, groups=list(groups))
        audit.record(
            conn,
            actor=caller.actor,
            action="principal.groups",
            tenant_id=tenant_id,
            target=principal_id,
            details={"groups": members, "via": caller.via},
        )
    return members


def reader_for(auth: KeyAuthenticator, principal: Principal, as_principal: str | None = None) -> Principal:
    """Whom a read is checked as: the caller with its groups read now, or the end user a
    delegating key reads for (``as_principal``).

    Raises:
        PermissionDeniedError: ``as_principal`` from a key that may not delegate.
        InvalidInputError: a malformed ``as_principal``.
    """
    if as_principal is not None:
        return auth.delegate(principal, validation.principal_id(as_principal)).principal
    return auth.with_current_groups(principal).principal


def judge_for(auth: KeyAuthenticator, principal: Principal, as_principal: str | None) -> Principal:
    """Whose relevance judgement a feedback is, checked as whom: the caller; with
    ``as_principal``, the end user a delegating key acts for (as on ``/v1/retrieve``) or, for a
    tenant admin that does not delegate, any principal of its tenant (as the console's search-as
    on ``/v1/admin/retrieve``, whose results the admin judges).

    Raises:
        PermissionDeniedError: ``as_principal`` from a key that neither delegates nor administers.
        InvalidInputError: a malformed ``as_principal``.
    """
    if (
        as_principal is not None
        and not principal.can_delegate
        and role_rules.has_role(principal.roles, role_rules.ADMIN)
    ):
        return auth.impersonate(principal, validation.principal_id(as_principal)).principal
    return reader_for(auth, principal, as_principal)


def readable_chunk(conn: psycopg.Connection, reader: Principal, *, chunk_id: str) -> ChunkDetail | None:
    """One live chunk ``reader`` may read, else None (absent and forbidden look alike)."""
    return serving.readable_chunk(
        conn, chunk_id=chunk_id, tenant_id=reader.tenant_id, readers=sorted(reader.readers)
    )


def readable_document_chunks(
    conn: psycopg.Connection, reader: Principal, *, external_id: str, limit: int
) -> list[ChunkDetail]:
    """A live document's leaf chunks in text order (at most ``limit``) if ``reader`` may
    read it, else none."""
    return serving.readable_document_chunks(
        conn, external_id=external_id, tenant_id=reader.tenant_id, readers=sorted(reader.readers), limit=limit
    )


def _reaches(authority: Authority, tenant_id: str) -> bool:
    return authority.tenant_id is None or authority.tenant_id == tenant_id


def _confine(authority: Authority, tenant_id: str) -> None:
    if not _reaches(authority, tenant_id):
        raise PermissionDeniedError("a key may only create keys in its own tenant")

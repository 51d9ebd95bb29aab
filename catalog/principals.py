"""Tenants, principals, group membership and API key rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import kwargs_row

from catalog.changes import record_change

# Revocations are announced on their own channel (payload: the key id) at commit, so every
# API process drops the key from its authentication cache (authz.revocations).
KEYS_CHANNEL = "ragline_key_revocations"


@dataclass(frozen=True, slots=True)
class KeyRow:
    key_id: str
    tenant_id: str
    principal_id: str
    key_hash: bytes
    roles: tuple[str, ...]
    can_delegate: bool
    name: str | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


def ensure_tenant(conn: psycopg.Connection, *, tenant_id: str) -> None:
    conn.execute("INSERT INTO tenants (tenant_id) VALUES (%s) ON CONFLICT DO NOTHING", (tenant_id,))


def ensure_principal(conn: psycopg.Connection, *, tenant_id: str, principal_id: str) -> None:
    ensure_tenant(conn, tenant_id=tenant_id)
    conn.execute(
        "INSERT INTO principals (tenant_id, principal_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        (tenant_id, principal_id),
    )


def principal_exists(conn: psycopg.Connection, *, tenant_id: str, principal_id: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM principals WHERE tenant_id = %s AND principal_id = %s", (tenant_id, principal_id)
    ).fetchone()
    return row is not None


def groups_of(conn: psycopg.Connection, *, tenant_id: str, principal_id: str) -> tuple[str, ...]:
    rows = conn.execute(
        "SELECT group_id FROM group_members WHERE tenant_id = %s AND principal_id = %s ORDER BY group_id",
        (tenant_id, principal_id),
    ).fetchall()
    return tuple(r[0] for r in rows)


@dataclass(frozen=True, slots=True)
class ReaderState:
    """What a read is checked against, from one snapshot: the principal's groups, the catalog
    change position, and whether the calling key has been revoked."""

    groups: tuple[str, ...]
    position: int
    key_revoked: bool


def reader_state(conn: psycopg.Connection, *, tenant_id: str, principal_id: str, key_id: str) -> ReaderState:
    """A principal's groups, the catalog change position and the calling key's revocation,
    read in one statement (one snapshot, one round trip): a search that catches up to that
    position sees every ACL change acknowledged before the groups were read, and a key
    revoked before the read is refused. ``key_id`` need not name a row (an OIDC principal's)."""
    row = conn.execute(
        "SELECT coalesce((SELECT array_agg(group_id ORDER BY group_id) FROM group_members"
        " WHERE tenant_id = %s AND principal_id = %s), '{}'::text[]),"
        " (SELECT coalesce(max(seq), 0) FROM catalog_changes),"
        " EXISTS (SELECT 1 FROM api_keys WHERE key_id = %s AND revoked_at IS NOT NULL)",
        (tenant_id, principal_id, key_id),
    ).fetchone()
    assert row is not None  # a SELECT without FROM always returns one row
    return ReaderState(tuple(row[0]), int(row[1]), bool(row[2]))


def replace_groups(conn: psycopg.Connection, *, tenant_id: str, principal_id: str, groups: list[str]) -> None:
    """Replace a principal's groups and record the change so caches drop stale ACL views."""
    ensure_principal(conn, tenant_id=tenant_id, principal_id=principal_id)
    conn.execute(
        "DELETE FROM group_members WHERE tenant_id = %s AND principal_id = %s", (tenant_id, principal_id)
    )
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO group_members (tenant_id, principal_id, group_id) VALUES (%s, %s, %s)",
            [(tenant_id, principal_id, g) for g in sorted(set(groups))],
        )
    record_change(conn, tenant_id=tenant_id, kind="groups")


@dataclass(frozen=True, slots=True)
class PrincipalRow:
    principal_id: str
    groups: tuple[str, ...]
    active_keys: int
    created_at: datetime


def _principal(*, groups: list[str] | None, **columns: Any) -> PrincipalRow:
    return PrincipalRow(groups=tuple(groups or ()), **columns)


def list_principals(conn: psycopg.Connection, *, tenant_id: str, limit: int = 1000) -> list[PrincipalRow]:
    """The tenant's principals with their groups and how many unrevoked keys each holds."""
    with conn.cursor(row_factory=kwargs_row(_principal)) as cur:
        return cur.execute(
            "SELECT p.principal_id, p.created_at,"
            " (SELECT array_agg(g.group_id ORDER BY g.group_id) FROM group_members g"
            "  WHERE g.tenant_id = p.tenant_id AND g.principal_id = p.principal_id) AS groups,"
            " (SELECT count(*) FROM api_keys k WHERE k.tenant_id = p.tenant_id"
            "  AND k.principal_id = p.principal_id AND k.revoked_at IS NULL) AS active_keys"
            " FROM principals p WHERE p.tenant_id = %s ORDER BY p.principal_id LIMIT %s",
            (tenant_id, limit),
        ).fetchall()


def insert_key(
    conn: psycopg.Connection,
    *,
    key_id: str,
    tenant_id: str,
    principal_id: str,
    key_hash: bytes,
    roles: list[str],
    can_delegate: bool,
    name: str | None,
) -> None:
    ensure_principal(conn, tenant_id=tenant_id, principal_id=principal_id)
    conn.execute(
        "INSERT INTO api_keys (key_id, tenant_id, principal_id, key_hash, roles, can_delegate, name)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (key_id, tenant_id, principal_id, key_hash, roles, can_delegate, name),
    )


_KEY_COLUMNS = (
    "key_id, tenant_id, principal_id, key_hash, roles, can_delegate, name, created_at,"
    " last_used_at, revoked_at"
)


def _key_row(*, key_hash: bytes, roles: list[str], **columns: Any) -> KeyRow:
    return KeyRow(key_hash=bytes(key_hash), roles=tuple(roles), **columns)


_KEY_ROW = kwargs_row(_key_row)


def get_key(conn: psycopg.Connection, *, key_id: str) -> KeyRow | None:
    with conn.cursor(row_factory=_KEY_ROW) as cur:
        return cur.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE key_id = %s", (key_id,)).fetchone()


def list_keys(conn: psycopg.Connection, *, tenant_id: str | None = None) -> list[KeyRow]:
    with conn.cursor(row_factory=_KEY_ROW) as cur:
        if tenant_id is None:
            return cur.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY created_at").fetchall()
        return cur.execute(
            f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE tenant_id = %s ORDER BY created_at", (tenant_id,)
        ).fetchall()


def revoke_key(conn: psycopg.Connection, *, key_id: str, tenant_id: str | None = None) -> bool:
    """Revoke an active key (only within ``tenant_id`` when given) and announce it on
    ``KEYS_CHANNEL``, delivered at commit; False if none matched."""
    cur = conn.execute(
        "UPDATE api_keys SET revoked_at = now() WHERE key_id = %s AND revoked_at IS NULL"
        " AND (%s::text IS NULL OR tenant_id = %s)",
        (key_id, tenant_id, tenant_id),
    )
    if cur.rowcount != 1:
        return False
    conn.execute("SELECT pg_notify(%s, %s)", (KEYS_CHANNEL, key_id))
    return True


def listen_revocations(conn: psycopg.Connection) -> None:
    """Subscribe ``conn`` (autocommit) to key revocations; each ``conn.notifies()`` payload is
    a revoked key's id."""
    conn.execute(f"LISTEN {KEYS_CHANNEL}")


def touch_key(conn: psycopg.Connection, *, key_id: str) -> None:
    conn.execute("UPDATE api_keys SET last_used_at = now() WHERE key_id = %s", (key_id,))

"""Index versions and aliases. An alias names the version serving nodes load."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from catalog.changes import record_change
from core.errors import ConflictError, NotFoundError


@dataclass(frozen=True, slots=True)
class VersionRow:
    version_id: str
    state: str
    path: str
    embedding_model: str
    dim: int
    n_shards: int
    chunk_count: int
    catalog_position: int
    params: Mapping[str, Any]
    error: str | None
    created_at: datetime
    built_at: datetime | None
    retired_at: datetime | None

    @property
    def chunking(self) -> str | None:
        """``TOKENS/OVERLAP`` most of the version's documents were cut with (None: built
        before versions recorded it)."""
        value = self.params.get("chunking")
        return str(value) if value else None


_FIELDS = (
    "version_id, state, path, embedding_model, dim, n_shards, chunk_count, catalog_position, params,"
    " error, created_at, built_at, retired_at"
)
_COLUMNS = ", ".join(
    f"coalesce(v.{c}, '{{}}') AS {c}" if c == "params" else f"v.{c}"
    for c in _FIELDS.replace(" ", "").split(",")
)
_VERSION_ROW = class_row(VersionRow)


def create_version(
    conn: psycopg.Connection,
    *,
    version_id: str,
    path: str,
    model: str,
    dim: int,
    n_shards: int,
    params: Mapping[str, Any],
) -> None:
    conn.execute(
        "INSERT INTO index_versions (version_id, state, path, embedding_model, dim, n_shards, params)"
        " VALUES (%s, 'building', %s, %s, %s, %s, %s)",
        (version_id, path, model, dim, n_shards, Jsonb(dict(params))),
    )


def mark_ready(conn: psycopg.Connection, *, version_id: str, chunk_count: int, catalog_position: int) -> None:
    conn.execute(
        "UPDATE index_versions SET state = 'ready', chunk_count = %s, catalog_position = %s, built_at = now()"
        " WHERE version_id = %s",
        (chunk_count, catalog_position, version_id),
    )


def mark_failed(conn: psycopg.Connection, *, version_id: str, error: str) -> None:
    conn.execute(
        "UPDATE index_versions SET state = 'failed', error = %s WHERE version_id = %s",
        (error[:2000], version_id),
    )


def get_version(conn: psycopg.Connection, *, version_id: str) -> VersionRow | None:
    with conn.cursor(row_factory=_VERSION_ROW) as cur:
        return cur.execute(
            f"SELECT {_COLUMNS} FROM index_versions v WHERE version_id = %s", (version_id,)
        ).fetchone()


def list_versions(conn: psycopg.Connection) -> list[VersionRow]:
    with conn.cursor(row_factory=_VERSION_ROW) as cur:
        return cur.execute(f"SELECT {_COLUMNS} FROM index_versions v ORDER BY created_at").fetchall()


def resolve_alias(conn: psycopg.Connection, *, alias: str) -> VersionRow | None:
    with conn.cursor(row_factory=_VERSION_ROW) as cur:
        return cur.execute(
            f"SELECT {_COLUMNS} FROM index_aliases a"
            " JOIN index_versions v ON v.version_id = a.version_id WHERE a.alias = %s",
            (alias,),
        ).fetchone()


@dataclass(frozen=True, slots=True)
class AliasRow:
    alias: str
    version_id: str
    previous_version: str | None


def alias_rows(conn: psycopg.Connection) -> list[AliasRow]:
    """Every alias with its target and the version it pointed at before (the rollback target)."""
    with conn.cursor(row_factory=class_row(AliasRow)) as cur:
        return cur.execute(
            "SELECT alias, version_id, previous_version FROM index_aliases ORDER BY alias"
        ).fetchall()


def aliases(conn: psycopg.Connection) -> dict[str, str]:
    return {r[0]: r[1] for r in conn.execute("SELECT alias, version_id FROM index_aliases ORDER BY alias")}


def swap_alias(conn: psycopg.Connection, *, alias: str, version_id: str) -> str | None:
    """Point ``alias`` at a ready version; returns the previous target."""
    target = get_version(conn, version_id=version_id)
    if target is None:
        raise NotFoundError(f"no index version {version_id}")
    if target.state != "ready":
        raise ConflictError(f"index version {version_id} is {target.state}, not ready")
    row = conn.execute(
        "SELECT version_id FROM index_aliases WHERE alias = %s FOR UPDATE", (alias,)
    ).fetchone()
    previous = row[0] if row else None
    conn.execute(
        "INSERT INTO index_aliases (alias, version_id, previous_version) VALUES (%s, %s, %s)"
        " ON CONFLICT (alias) DO UPDATE SET version_id = EXCLUDED.version_id,"
        " previous_version = index_aliases.version_id, updated_at = now()",
        (alias, version_id, previous),
    )
    record_change(conn, tenant_id="*", kind="alias")
    return previous


def forget_previous(conn: psycopg.Connection, *, alias: str) -> str | None:
    """Drop ``alias``'s rollback target (a purge ended the rollback window: that version's
    files hold purged text); returns it, so GC may delete it past its grace."""
    row = conn.execute(
        "UPDATE index_aliases a SET previous_version = NULL FROM index_aliases old"
        " WHERE a.alias = %s AND old.alias = a.alias RETURNING old.previous_version",
        (alias,),
    ).fetchone()
    return row[0] if row else None


def retire(conn: psycopg.Connection, *, version_id: str) -> None:
    conn.execute(
        "UPDATE index_versions SET state = 'deleted', retired_at = now() WHERE version_id = %s", (version_id,)
    )


def gc_candidates(conn: psycopg.Connection, *, grace_seconds: int) -> list[VersionRow]:
    """Versions no alias points at, older than the grace period."""
    with conn.cursor(row_factory=_VERSION_ROW) as cur:
        return cur.execute(
            f"SELECT {_COLUMNS} FROM index_versions v WHERE state IN ('ready', 'failed')"
            " AND NOT EXISTS (SELECT 1 FROM index_aliases a WHERE a.version_id = v.version_id"
            "                 OR a.previous_version = v.version_id)"
            " AND coalesce(built_at, created_at) < now() - make_interval(secs => %s)",
            (grace_seconds,),
        ).fetchall()


def drop_alias(conn: psycopg.Connection, *, alias: str) -> None:
    """Remove an alias (a migration gate's temporary one); its versions stay."""
    conn.execute("DELETE FROM index_aliases WHERE alias = %s", (alias,))

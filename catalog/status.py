"""Reads behind ``ragline status`` and ``GET /v1/admin/status``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.rows import class_row


@dataclass(frozen=True, slots=True)
class MigrationRow:
    number: int
    name: str
    applied_at: datetime


@dataclass(frozen=True, slots=True)
class RebuildRow:
    version_id: str
    state: str
    chunk_count: int
    catalog_position: int
    created_at: datetime
    built_at: datetime | None
    error: str | None


@dataclass(frozen=True, slots=True)
class Freshness:
    position: int  # the newest catalog change
    oldest_unindexed_at: datetime | None  # the oldest change after ``after`` (None: none)
    changes_after: int


def last_migration(conn: psycopg.Connection) -> MigrationRow | None:
    with conn.cursor(row_factory=class_row(MigrationRow)) as cur:
        return cur.execute(
            "SELECT number, name, applied_at FROM schema_migrations ORDER BY number DESC LIMIT 1"
        ).fetchone()


def last_rebuild(conn: psycopg.Connection) -> RebuildRow | None:
    """The newest index version started, whatever became of it."""
    with conn.cursor(row_factory=class_row(RebuildRow)) as cur:
        return cur.execute(
            "SELECT version_id, state, chunk_count, catalog_position, created_at, built_at, error"
            " FROM index_versions ORDER BY created_at DESC LIMIT 1"
        ).fetchone()


def freshness(conn: psycopg.Connection, *, after: int, tenant_id: str | None = None) -> Freshness:
    """How far the catalog has moved past position ``after`` (a version's build position);
    with ``tenant_id``, counting only that tenant's changes."""
    row = conn.execute(
        "SELECT coalesce(max(seq), 0), min(created_at) FILTER (WHERE seq > %s),"
        " count(*) FILTER (WHERE seq > %s) FROM catalog_changes"
        " WHERE %s::text IS NULL OR tenant_id = %s",
        (after, after, tenant_id, tenant_id),
    ).fetchone()
    if row is None:
        return Freshness(0, None, 0)
    return Freshness(int(row[0]), row[1], int(row[2]))

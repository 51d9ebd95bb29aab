"""Index administration shared by ``ragline index`` and the operator console: an overview of
versions and aliases, checked swaps and rollbacks, and garbage collection."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from catalog import audit
from catalog import indexes as indexes_repo
from catalog import maintenance as maintenance_repo
from catalog.indexes import AliasRow, VersionRow
from core.errors import ConflictError, IndexIntegrityError, NotFoundError
from index.manifest import read_manifest, verify_version


@dataclass(frozen=True, slots=True)
class VersionOverview:
    """One index version as an operator sees it (counts from its files and the catalog)."""

    version_id: str
    state: str
    aliases: tuple[str, ...]
    rollback_of: tuple[str, ...]  # aliases whose previous version (rollback target) this is
    model: str
    dim: int
    shards: int
    kinds: tuple[str, ...]
    chunks: int
    hidden: int  # indexed chunks deleted or superseded since the build
    hidden_fraction: float
    delta: int  # visible chunks written after the build, served from the delta
    position: int
    created_at: datetime
    built_at: datetime | None
    build_seconds: float | None
    error: str | None
    gate: Mapping[str, Any] | None  # a migration's gate results for this (target) version


def _files(v: VersionRow) -> tuple[tuple[str, ...], list[int], float | None]:
    """Shard kinds, indexed row ids and build time from the version's files (empty if unreadable)."""
    path = Path(v.path)
    try:
        manifest = read_manifest(path)
        rows = [np.load(path / s.path / "row_ids.npy") for s in manifest.shards]
    except (IndexIntegrityError, OSError, ValueError):
        return (), [], None
    flat = np.concatenate(rows).tolist() if rows else []
    return tuple(s.kind for s in manifest.shards), flat, manifest.build_seconds


def overview(conn: psycopg.Connection) -> tuple[list[VersionOverview], list[AliasRow]]:
    """Every version that is not deleted, newest first, and every alias."""
    aliases = indexes_repo.alias_rows(conn)
    out = []
    for v in reversed(indexes_repo.list_versions(conn)):
        if v.state == "deleted":
            continue
        kinds, rows, build_s = _files(v) if v.state == "ready" else ((), [], None)
        hidden = maintenance_repo.hidden_count(conn, rows=rows) if rows else 0
        out.append(
            VersionOverview(
                version_id=v.version_id,
                state=v.state,
                aliases=tuple(a.alias for a in aliases if a.version_id == v.version_id),
                rollback_of=tuple(a.alias for a in aliases if a.previous_version == v.version_id),
                model=v.embedding_model,
                dim=v.dim,
                shards=v.n_shards,
                kinds=kinds,
                chunks=v.chunk_count,
                hidden=hidden,
                hidden_fraction=round(hidden / len(rows), 4) if rows else 0.0,
                delta=maintenance_repo.fresh_leaf_count(conn, after_position=v.catalog_position)
                if v.state == "ready"
                else 0,
                position=v.catalog_position,
                created_at=v.created_at,
                built_at=v.built_at,
                build_seconds=build_s,
                error=v.error,
                gate=v.params.get("gate"),
            )
        )
    return out, aliases


def swap(
    conn: psycopg.Connection,
    *,
    alias: str,
    version_id: str,
    actor: str,
    via: str,
    reasons: Sequence[str] = (),
) -> str | None:
    """Point ``alias`` at ``version_id`` after checking its files; returns the previous target.

    Raises:
        NotFoundError: no such version.
        ConflictError: the version is not ready, or its files do not match its manifest
            (nothing is swapped).
    """
    row = indexes_repo.get_version(conn, version_id=version_id)
    if row is None:
        raise NotFoundError(f"no index version {version_id}")
    try:
        verify_version(Path(row.path))  # refuse a corrupt version before any node tries it
    except IndexIntegrityError as exc:
        raise ConflictError(f"index version {version_id} fails verification: {exc.message}") from exc
    return point_alias(conn, alias=alias, version_id=version_id, actor=actor, via=via, reasons=reasons)


def point_alias(
    conn: psycopg.Connection,
    *,
    alias: str,
    version_id: str,
    actor: str,
    via: str,
    reasons: Sequence[str] = (),
) -> str | None:
    """Move ``alias`` to ``version_id`` and audit ``index.swap`` in one transaction, without
    re-checking the files (a version this process just built); returns the previous target."""
    with conn.transaction():
        previous = indexes_repo.swap_alias(conn, alias=alias, version_id=version_id)
        audit.record(
            conn,
            actor=actor,
            action="index.swap",
            target=alias,
            details={"from": previous, "to": version_id, "reasons": list(reasons), "via": via},
        )
    return previous


def record_rebuild(
    conn: psycopg.Connection, *, version_id: str, actor: str, via: str, reasons: Sequence[str] = ()
) -> None:
    """Audit ``index.rebuild`` for a version just built (CLI, schedule or maintenance tick)."""
    row = indexes_repo.get_version(conn, version_id=version_id)
    with conn.transaction():
        audit.record(
            conn,
            actor=actor,
            action="index.rebuild",
            target=version_id,
            details={
                "model": row.embedding_model if row else None,
                "shards": row.n_shards if row else None,
                "chunks": row.chunk_count if row else None,
                "reasons": list(reasons),
                "via": via,
            },
        )


def rollback(conn: psycopg.Connection, *, alias: str, actor: str, via: str) -> tuple[str, str]:
    """Point ``alias`` back at the version it pointed at before; returns (from, to)."""
    row = next((a for a in indexes_repo.alias_rows(conn) if a.alias == alias), None)
    if row is None:
        raise NotFoundError(f"no alias {alias}")
    if row.previous_version is None or row.previous_version == row.version_id:
        raise ConflictError(f"alias {alias} has no earlier version to roll back to")
    swap(conn, alias=alias, version_id=row.previous_version, actor=actor, via=via, reasons=("rollback",))
    return row.version_id, row.previous_version


@dataclass(frozen=True, slots=True)
class GcReport:
    deleted: tuple[str, ...]
    kept: tuple[tuple[str, str], ...]  # (version id, why it was kept)


def collect_garbage(conn: psycopg.Connection, *, grace_seconds: int, actor: str, via: str) -> GcReport:
    """Delete the files of versions no alias uses (nor could roll back to) past the grace
    period; audits ``index.gc`` when it deleted any."""
    deleted = []
    for v in indexes_repo.gc_candidates(conn, grace_seconds=grace_seconds):
        shutil.rmtree(v.path, ignore_errors=True)
        with conn.transaction():
            indexes_repo.retire(conn, version_id=v.version_id)
        deleted.append(v.version_id)
    if deleted:
        with conn.transaction():
            audit.record(
                conn,
                actor=actor,
                action="index.gc",
                target=",".join(deleted),
                details={"deleted": deleted, "via": via},
            )
    kept = kept_reasons(indexes_repo.list_versions(conn), indexes_repo.alias_rows(conn), grace_seconds)
    return GcReport(tuple(deleted), tuple(kept))


def kept_reasons(
    versions: list[VersionRow], aliases: list[AliasRow], grace_seconds: int
) -> list[tuple[str, str]]:
    """Why each remaining version is not garbage, in the words ``gc`` uses."""
    now = datetime.now(UTC)
    out = []
    for v in versions:
        if v.state == "deleted":
            continue
        reasons = [f"alias {a.alias}" for a in aliases if a.version_id == v.version_id]
        reasons += [
            f"rollback target of alias {a.alias}" for a in aliases if a.previous_version == v.version_id
        ]
        if v.state == "building":
            reasons.append("still building")
        age = (now - (v.built_at or v.created_at)).total_seconds()
        if not reasons and age < grace_seconds:
            reasons.append(f"{age:.0f} s old, inside the {grace_seconds} s grace period")
        out.append((v.version_id, ", ".join(reasons) or "unaliased"))
    return out

"""Index lifecycle operations: rebuild, swap, rollback, garbage collection, and the reads an
operator needs to decide them (overview, versions, quality, capacity, verification).

``ragline index``, the console's ``/v1/admin/index...`` routes, ``ragline run`` and the
maintenance tick call these same functions; only the :class:`~services.caller.Caller`
differs, so an ``index.swap`` from the CLI and one from the console carry one audit shape
(``via`` says which path). Each mutating function writes its audit entry in the transaction
that made the change.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg_pool import ConnectionPool

from catalog import audit
from catalog import chunkings as chunkings_repo
from catalog import indexes as indexes_repo
from catalog import maintenance as maintenance_repo
from catalog import purge as purge_repo
from catalog import reembed as reembed_repo
from catalog.indexes import AliasRow, VersionRow
from catalog.maintenance import EmbeddingStats
from core.errors import ConflictError, IndexIntegrityError, NotFoundError
from index.manifest import read_manifest, verify_version
from index.quality import ShardQuality
from index.quality import version_quality as _shard_quality
from jobs.index_verify import Reconciliation, reconcile
from jobs.rebuild_job import RebuildAdvice, RebuildConfig, rebuild_advice, rebuild_on_ray
from jobs.rebuild_job import rebuild as build_version
from retrieve.service import SearchService
from services.caller import Caller

log = logging.getLogger(__name__)

__all__ = [
    "AliasRow",
    "EmbeddingStats",
    "GcReport",
    "MigrationRunning",
    "OnRay",
    "Rebuilt",
    "Reconciliation",
    "RebuildAdvice",
    "Serving",
    "ShardQuality",
    "VersionOverview",
    "VersionRow",
    "collect_garbage",
    "corpus_stats",
    "follow_alias",
    "forget_rollback",
    "get_version",
    "list_versions",
    "overview",
    "rebuild",
    "rebuild_advice",
    "rebuild_and_forget",
    "rebuild_model",
    "rollback",
    "serves",
    "serving",
    "swap",
    "verify_alias",
    "version_quality",
]


# --- reads ----------------------------------------------------------------------------------


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


def _overview_of(conn: psycopg.Connection, v: VersionRow, aliases: list[AliasRow]) -> VersionOverview:
    kinds, rows, build_s = _files(v) if v.state == "ready" else ((), [], None)
    hidden = maintenance_repo.hidden_count(conn, rows=rows) if rows else 0
    delta = (
        maintenance_repo.fresh_leaf_count(conn, after_position=v.catalog_position)
        if v.state == "ready"
        else 0
    )
    return VersionOverview(
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
        delta=delta,
        position=v.catalog_position,
        created_at=v.created_at,
        built_at=v.built_at,
        build_seconds=build_s,
        error=v.error,
        gate=v.params.get("gate"),
    )


def overview(conn: psycopg.Connection) -> tuple[list[VersionOverview], list[AliasRow]]:
    """Every version that is not deleted, newest first, and every alias."""
    aliases = indexes_repo.alias_rows(conn)
    versions = [
        _overview_of(conn, v, aliases)
        for v in reversed(indexes_repo.list_versions(conn))
        if v.state != "deleted"
    ]
    return versions, aliases


def list_versions(conn: psycopg.Connection) -> tuple[list[VersionRow], dict[str, str]]:
    """Every version's catalog row, oldest first, and each alias's target (``ragline index list``)."""
    return indexes_repo.list_versions(conn), indexes_repo.aliases(conn)


def get_version(conn: psycopg.Connection, version_id: str) -> VersionRow | None:
    return indexes_repo.get_version(conn, version_id=version_id)


def serves(conn: psycopg.Connection, *, alias: str) -> bool:
    """Whether ``alias`` points at a version yet."""
    return indexes_repo.resolve_alias(conn, alias=alias) is not None


def corpus_stats(conn: psycopg.Connection, *, model: str) -> EmbeddingStats:
    """How many ``model`` vectors a full index of the corpus holds now, and their dimension
    (capacity planning: what `ragline index verify` counts in a version built now)."""
    return maintenance_repo.embedding_stats(conn, model=model)


def verify_alias(conn: psycopg.Connection, *, alias: str) -> Reconciliation | None:
    """The alias's version's files checked and its counts reconciled with the catalog; None
    when the alias points at no version yet."""
    target = indexes_repo.resolve_alias(conn, alias=alias)
    return None if target is None else reconcile(conn, target)


def version_quality(
    pool: ConnectionPool, version_id: str, *, sample: int, k: int, ef_search: int, nprobe: int
) -> list[ShardQuality]:
    """recall@``k`` of each shard's ANN index against exact search on a sample of its vectors.

    Raises:
        NotFoundError: no such version, or it is not ready.
    """
    with pool.connection() as conn:
        row = indexes_repo.get_version(conn, version_id=version_id)
    if row is None or row.state != "ready":
        raise NotFoundError(f"no ready index version {version_id}")
    return _shard_quality(Path(row.path), sample=sample, k=k, ef_search=ef_search, nprobe=nprobe)


@dataclass(frozen=True, slots=True)
class Serving:
    """What this node's search service serves now."""

    version_id: str
    model: str
    last_swap_error: str | None


def serving(search: SearchService | None) -> Serving | None:
    """This node's served version and model; None on a server without a search service."""
    if search is None:
        return None
    return Serving(search.state.current.version_id, search.state.model_name, search.last_swap_error)


def follow_alias(search: SearchService | None, pool: ConnectionPool, alias: str) -> str | None:
    """Have this node's search service follow ``alias`` at once (other nodes follow on the
    catalog's NOTIFY); returns the version it now serves, or None when it serves another alias
    or there is no search service. Call it after the swap committed."""
    if search is None or search.watcher.alias != alias:
        return None
    with pool.connection() as conn:
        search.watcher.check_alias(conn)
    return search.state.current.version_id


# --- swap and rollback ----------------------------------------------------------------------


def swap(
    conn: psycopg.Connection, *, alias: str, version_id: str, caller: Caller, reasons: Sequence[str] = ()
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
    return _point_alias(conn, alias=alias, version_id=version_id, caller=caller, reasons=reasons)


def _point_alias(
    conn: psycopg.Connection, *, alias: str, version_id: str, caller: Caller, reasons: Sequence[str]
) -> str | None:
    """Move ``alias`` and audit ``index.swap`` in one transaction, without re-checking the
    files (a version this process just built or :func:`swap` verified).

    Chunking is a property of the corpus: documents cut with another chunking than the
    version's are pointed back at their versions cut with it (a rollback past a re-chunking
    migration serves the chunks the version holds, not the new ones from its delta); those
    changed since keep theirs, named in the audit entry's ``chunking.kept``.
    """
    with conn.transaction():
        previous = indexes_repo.swap_alias(conn, alias=alias, version_id=version_id)
        aligned = chunkings_repo.align_to_version(conn, version_id=version_id)
        details: dict[str, Any] = {
            "from": previous,
            "to": version_id,
            "reasons": list(reasons),
            "via": caller.via,
        }
        if aligned is not None and (aligned.restored or aligned.kept):
            details["chunking"] = aligned.as_json()
        audit.record(conn, actor=caller.actor, action="index.swap", target=alias, details=details)
    if aligned is not None and aligned.kept:
        log.warning(
            "%s -> %s: %d documents changed since have no version cut %s; they keep their chunks"
            " until re-ingested or re-chunked",
            alias,
            version_id,
            len(aligned.kept),
            aligned.chunking,
        )
    return previous


def rollback(conn: psycopg.Connection, *, alias: str, caller: Caller) -> tuple[str, str]:
    """Point ``alias`` back at the version it pointed at before (an ``index.swap`` with reason
    ``rollback``); returns (from, to)."""
    row = next((a for a in indexes_repo.alias_rows(conn) if a.alias == alias), None)
    if row is None:
        raise NotFoundError(f"no alias {alias}")
    if row.previous_version is None or row.previous_version == row.version_id:
        raise ConflictError(f"alias {alias} has no earlier version to roll back to")
    swap(conn, alias=alias, version_id=row.previous_version, caller=caller, reasons=("rollback",))
    return row.version_id, row.previous_version


# --- rebuild --------------------------------------------------------------------------------


class MigrationRunning(ConflictError):
    """A model migration is running: rebuilds wait for it (it builds the next version)."""

    def __init__(self, job_id: object) -> None:
        super().__init__(f"a model migration is running (job {job_id}); rebuilds wait for it")
        self.job_id = job_id


def rebuild_model(conn: psycopg.Connection, *, alias: str, configured_model: str) -> str:
    """The model a rebuild of ``alias`` embeds with: the one its version serves (a migrated
    alias keeps its model), else the configured one.

    Raises:
        MigrationRunning: a model migration is active.
    """
    migration = reembed_repo.active_migration(conn)
    if migration is not None:
        raise MigrationRunning(migration.job_id)
    live = indexes_repo.resolve_alias(conn, alias=alias)
    return live.embedding_model if live else configured_model


@dataclass(frozen=True, slots=True)
class OnRay:
    """Build as a Ray task on this cluster (started here when ``address`` is local)."""

    address: str
    data_dir: Path


@dataclass(frozen=True, slots=True)
class Rebuilt:
    version_id: str
    swapped: str | None  # the alias pointed at it, or None
    previous: str | None  # that alias's target before


def rebuild(
    conn: psycopg.Connection,
    conninfo: str,
    config: RebuildConfig,
    *,
    caller: Caller,
    swap_alias: str | None = None,
    reasons: Sequence[str] = (),
    on_ray: OnRay | None = None,
) -> Rebuilt:
    """Build a version from the catalog, audit ``index.rebuild`` and, with ``swap_alias``,
    point that alias at it (``index.swap``, no re-verification: this process just built it)."""
    if on_ray is not None:
        from jobs.ray_runtime import ensure_ray

        ensure_ray(address=on_ray.address, data_dir=on_ray.data_dir)
        version_id = rebuild_on_ray(conninfo, config)
    else:
        version_id = build_version(conninfo, config)
    _record_rebuild(conn, version_id=version_id, caller=caller, reasons=reasons)
    previous = None
    if swap_alias is not None:
        previous = _point_alias(conn, alias=swap_alias, version_id=version_id, caller=caller, reasons=reasons)
    return Rebuilt(version_id, swap_alias, previous)


def _record_rebuild(
    conn: psycopg.Connection, *, version_id: str, caller: Caller, reasons: Sequence[str]
) -> None:
    row = indexes_repo.get_version(conn, version_id=version_id)
    with conn.transaction():
        audit.record(
            conn,
            actor=caller.actor,
            action="index.rebuild",
            target=version_id,
            details={
                "model": row.embedding_model if row else None,
                "shards": row.n_shards if row else None,
                "chunks": row.chunk_count if row else None,
                "reasons": list(reasons),
                "via": caller.via,
            },
        )


def rebuild_and_forget(
    conn: psycopg.Connection,
    conninfo: str,
    config: RebuildConfig,
    *,
    alias: str,
    caller: Caller,
    reasons: Sequence[str],
) -> str:
    """Rebuild ``alias`` from the purged catalog, swap it and drop its rollback target (whose
    files hold purged text), audited as ``index.forget_rollback``; returns the new version."""
    built = rebuild(conn, conninfo, config, caller=caller, swap_alias=alias, reasons=reasons).version_id
    forget_rollback(conn, alias=alias, caller=caller)
    return built


def forget_rollback(conn: psycopg.Connection, *, alias: str, caller: Caller) -> str | None:
    """Drop ``alias``'s rollback target, whose files hold purged text, so GC may delete it;
    audited as ``index.forget_rollback``. Returns the version forgotten."""
    with conn.transaction():
        forgotten = indexes_repo.forget_previous(conn, alias=alias)
        audit.record(
            conn,
            actor=caller.actor,
            action="index.forget_rollback",
            target=alias,
            details={"version": forgotten, "reason": "its files hold purged text", "via": caller.via},
        )
    return forgotten


# --- garbage collection ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GcReport:
    deleted: tuple[str, ...]
    kept: tuple[tuple[str, str], ...]  # (version id, why it was kept)


def collect_garbage(conn: psycopg.Connection, *, grace_seconds: int, caller: Caller) -> GcReport:
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
                actor=caller.actor,
                action="index.gc",
                target=",".join(deleted),
                details={"deleted": deleted, "via": caller.via},
            )
    versions = [v for v in indexes_repo.list_versions(conn) if v.state != "deleted"]
    stale = {v.version_id for v in versions if purge_repo.purged_since(conn, version_id=v.version_id)}
    kept = _kept_reasons(versions, indexes_repo.alias_rows(conn), grace_seconds, stale)
    return GcReport(tuple(deleted), tuple(kept))


def _kept_reasons(
    versions: list[VersionRow], aliases: list[AliasRow], grace_seconds: int, stale: set[str]
) -> list[tuple[str, str]]:
    """Why each remaining version is not garbage, in the words ``gc`` uses; a kept version
    built before the last purge says it may still hold purged text (an erasure rebuilds the
    versions aliases pin that hold its document, but not ``--no-rebuild``'s nor the tick's)."""
    now = datetime.now(UTC)
    out = []
    for v in versions:
        reasons = [f"alias {a.alias}" for a in aliases if a.version_id == v.version_id]
        reasons += [
            f"rollback target of alias {a.alias}" for a in aliases if a.previous_version == v.version_id
        ]
        if v.state == "building":
            reasons.append("still building")
        age = (now - (v.built_at or v.created_at)).total_seconds()
        if not reasons and age < grace_seconds:
            reasons.append(f"{age:.0f} s old, inside the {grace_seconds} s grace period")
        why = ", ".join(reasons) or "unaliased"
        if v.version_id in stale:
            why += "; built before the last purge: may hold purged text (rebuild it or move the alias)"
        out.append((v.version_id, why))
    return out

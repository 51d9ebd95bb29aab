"""One report of what a ragline deployment is serving and doing: ``ragline status`` and
``GET /v1/admin/status`` both call :func:`deployment_status`.

Everything but ``node`` is read from the catalog and the version folders, so the CLI and every
replica give the same answer; the API adds what its own serving node sees. The records here
are the one definition of the report: the API answers them as they are (its response model is
:class:`StatusReport`; the field descriptions below are its OpenAPI descriptions).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import psycopg

from catalog import fusion as fusion_repo
from catalog import indexes as indexes_repo
from catalog import jobs as jobs_repo
from catalog import maintenance as maintenance_repo
from catalog import status as status_repo
from catalog.status import MigrationRow, RebuildRow
from index.capacity import estimate_capacity
from index.faiss_shards import DenseKind
from index.manifest import read_manifest
from services import jobs as jobs_service

if TYPE_CHECKING:  # the CLI's report needs no search service
    from retrieve.service import FusionConfig, SearchService


_EXAMPLE: dict[str, Any] = {
    "model": "bundled:all-MiniLM-L6-v2",
    "alias": "live",
    "aliases": [{"alias": "live", "version_id": "v-20261201-0800", "previous_version": None}],
    "live_version": "v-20261201-0800",
    "shards": [{"shard": 0, "kind": "flat", "vectors": 5120, "hidden": 12, "hidden_fraction": 0.0023}],
    "delta_chunks": 40,
    "catalog_position": 1234,
    "changes_since_build": 17,
    "freshness_lag_s": 312.5,
    "running_jobs": [],
    "last_rebuild": None,
    "last_migration": {"number": 3, "name": "audit_retention", "applied_at": "2026-12-01T08:00:00Z"},
    "capacity": None,
    "node": None,
    "rerank_breakers": [],
}


@dataclass(frozen=True, slots=True)
class AliasStatus:
    alias: str
    version_id: str
    previous_version: str | None


@dataclass(frozen=True, slots=True)
class ShardStatus:
    shard: int
    kind: str
    vectors: int
    hidden: int = field(
        metadata={"description": "Vectors deleted or superseded since the build (masked at query time)."}
    )
    hidden_fraction: float


@dataclass(frozen=True, slots=True)
class RunningJob:
    job_id: str
    tenant_id: str
    kind: str
    state: str
    documents_done: int
    documents_total: int
    started_at: datetime | None
    unit: str = field(metadata={"description": "What the counts count: chunks for a model migration."})
    progress: str = field(metadata={"description": "The counts in words, as `ragline jobs` shows them."})


@dataclass(frozen=True, slots=True)
class Capacity:
    """The live version's estimated footprint against what this machine has left."""

    vectors: int
    dim: int
    kind: str
    serve_ram_bytes: int
    swap_extra_bytes: int  # a swap loads the next version beside the current one
    disk_bytes: int
    ram_available_bytes: int | None
    disk_free_bytes: int
    ram_headroom_bytes: int | None = field(
        metadata={"description": "Available RAM minus what the next swap needs."}
    )
    disk_headroom_bytes: int = field(metadata={"description": "Free disk minus one more version."})


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """What the answering replica itself serves."""

    serving_version: str
    view_position: int
    lag_positions: int = field(metadata={"description": "Catalog changes this node has not applied yet."})
    delta_chunks: int
    shards: list[ShardStatus]


@dataclass(frozen=True, slots=True)
class RerankBreakerStatus:
    """A tenant's rerank circuit breaker on the answering node (``retrieve.rerank_breaker``)."""

    tenant_id: str
    state: Literal["closed", "open", "half_open"] = field(
        metadata={
            "description": "open: its answers skip the reranker (degraded 'rerank suspended') after"
            " repeated rerank timeouts; half_open: one trial request reranks; closed: reranking."
        }
    )
    consecutive_timeouts: int
    opened: int = field(metadata={"description": "Times it opened since this node started."})
    retry_in_s: float | None = field(metadata={"description": "Open: seconds until the next trial."})


@dataclass(frozen=True, slots=True)
class StatusReport:
    """``GET /v1/admin/status`` and ``ragline status``: the deployment from the catalog, and
    (the API, for an operator) this replica's view. ``model`` is the model that answers: the
    live version's (the configured one only while there is no version)."""

    __pydantic_config__ = {"json_schema_extra": {"examples": [_EXAMPLE]}}

    model: str
    alias: str
    aliases: list[AliasStatus]
    live_version: str | None
    shards: list[ShardStatus]
    delta_chunks: int  # live chunks committed after the live version was built
    catalog_position: int | None = field(
        metadata={
            "description": "The newest catalog change (one sequence for every tenant); null for a"
            " tenant admin, to whom its advance would show other tenants' activity."
        }
    )
    changes_since_build: int
    freshness_lag_s: float | None = field(
        metadata={
            "description": "Age of the oldest catalog change the live version does not hold"
            " (served from the delta)."
        }
    )
    running_jobs: list[RunningJob]
    last_rebuild: RebuildRow | None
    last_migration: MigrationRow | None = field(
        metadata={"description": "The catalog's last schema migration applied (not a model migration)."}
    )
    capacity: Capacity | None
    node: NodeStatus | None = None
    scope: Literal["deployment", "tenant"] = field(
        default="deployment",
        metadata={
            "description": "'tenant' for a tenant admin: its own jobs, changes and delta only; no shard"
            " sizes, capacity, last rebuild, catalog position or node view (they count every"
            " tenant's chunks or changes)."
        },
    )
    rerank_breakers: list[RerankBreakerStatus] = field(
        default_factory=list,
        metadata={
            "description": "The answering node's tenants with a rerank timeout or a suspension since"
            " it started (a tenant admin: its own); empty from the CLI, which serves nothing."
        },
    )


def deployment_status(
    conn: psycopg.Connection,
    *,
    alias: str,
    default_model: str,
    index_root: Path,
    tenant_id: str | None = None,
    search: SearchService | None = None,
) -> StatusReport:
    """The status of the deployment (one tenant's share of it with ``tenant_id``) serving
    ``alias``; with ``search`` (the API's own service) and no tenant, this node's view too."""
    report = status_report(
        conn, alias=alias, default_model=default_model, index_root=index_root, tenant_id=tenant_id
    )
    if search is not None and search.breakers is not None:
        breakers = [
            RerankBreakerStatus(b.tenant_id, b.state, b.consecutive_timeouts, b.opened, b.retry_in_s)
            for b in search.breakers.breakers(tenant_id)
        ]
        report = replace(report, rerank_breakers=breakers)
    if tenant_id is not None or search is None or report.catalog_position is None:
        return report
    node = node_status(search, report.catalog_position)
    return report if node is None else replace(report, node=node)


def node_status(search: SearchService, catalog_position: int) -> NodeStatus | None:
    """What ``search`` serves now, against the catalog's ``catalog_position``; None before it
    loaded a snapshot."""
    snap = search.serving()
    if snap is None:
        return None
    view = search.view_position
    return NodeStatus(
        serving_version=snap.version_id,
        view_position=view,
        lag_positions=max(0, catalog_position - view),
        delta_chunks=snap.delta.size,
        shards=[
            ShardStatus(s.shard, s.kind, s.vectors, s.hidden, s.hidden_fraction) for s in search.shard_stats()
        ],
    )


def status_report(
    conn: psycopg.Connection,
    *,
    alias: str,
    default_model: str,
    index_root: Path,
    tenant_id: str | None = None,
) -> StatusReport:
    """The deployment's status as the catalog and the live version's files tell it.

    With ``tenant_id`` (a tenant admin asking), only that tenant's jobs, changes and delta;
    shard sizes, capacity and the last rebuild count every tenant's chunks, and the catalog
    position is one sequence every tenant's changes advance (even the tenant's own newest
    change's number counts the others' before it), so they are left out rather than hint at
    how much other tenants hold or do.
    """
    target = indexes_repo.resolve_alias(conn, alias=alias)
    shards: list[ShardStatus] = []
    capacity = None
    built_at = 0
    if target is not None:
        built_at = target.catalog_position
        if tenant_id is None:
            shards = _shards(conn, Path(target.path))
            capacity = _capacity(shards, target.dim, index_root)
    fresh = status_repo.freshness(conn, after=built_at, tenant_id=tenant_id)
    lag = (
        (datetime.now(UTC) - fresh.oldest_unindexed_at).total_seconds() if fresh.oldest_unindexed_at else None
    )
    running = [
        RunningJob(
            str(j.job_id),
            j.tenant_id,
            j.kind,
            j.state,
            j.documents_done,
            j.documents_total,
            j.started_at,
            unit=jobs_service.job_unit(j.kind),
            progress=jobs_service.progress_line(
                kind=j.kind,
                state=j.state,
                total=j.documents_total,
                done=j.documents_done,
                failed=j.documents_failed,
            ),
        )
        for state in ("running", "queued")
        for j in jobs_repo.list_jobs(conn, tenant_id=tenant_id, state=state, limit=50)
    ]
    return StatusReport(
        model=target.embedding_model if target else default_model,
        alias=alias,
        aliases=[
            AliasStatus(a.alias, a.version_id, a.previous_version) for a in indexes_repo.alias_rows(conn)
        ],
        live_version=target.version_id if target else None,
        shards=shards,
        delta_chunks=maintenance_repo.fresh_leaf_count(conn, after_position=built_at, tenant_id=tenant_id),
        catalog_position=fresh.position if tenant_id is None else None,
        changes_since_build=fresh.changes_after,
        freshness_lag_s=lag,
        running_jobs=running,
        last_rebuild=status_repo.last_rebuild(conn) if tenant_id is None else None,
        last_migration=status_repo.last_migration(conn),
        capacity=capacity,
        scope="deployment" if tenant_id is None else "tenant",
    )


def _shards(conn: psycopg.Connection, path: Path) -> list[ShardStatus]:
    out = []
    for number, entry in enumerate(read_manifest(path).shards):
        rows = np.load(path / entry.path / "row_ids.npy")
        hidden = maintenance_repo.hidden_count(conn, rows=rows.tolist()) if len(rows) else 0
        out.append(ShardStatus(number, entry.kind, len(rows), hidden, hidden / max(1, len(rows))))
    return out


def _capacity(shards: list[ShardStatus], dim: int, index_root: Path) -> Capacity:
    vectors = sum(s.vectors for s in shards)
    order = ["flat", "hnsw", "ivfpq"]
    kinds = {s.kind for s in shards if s.vectors and s.kind in order}
    kind = cast(DenseKind, max(kinds, key=order.index) if kinds else "flat")
    report = estimate_capacity(vectors, dim, kind=kind)
    ram = _available_ram()
    disk = shutil.disk_usage(index_root if index_root.exists() else Path.cwd()).free
    return Capacity(
        vectors=vectors,
        dim=dim,
        kind=kind,
        serve_ram_bytes=report.serve_ram_bytes,
        swap_extra_bytes=report.swap_extra_bytes,
        disk_bytes=report.disk_bytes,
        ram_available_bytes=ram,
        disk_free_bytes=disk,
        ram_headroom_bytes=None if ram is None else ram - report.swap_extra_bytes,
        disk_headroom_bytes=disk - report.disk_bytes,
    )


def _available_ram() -> int | None:
    """MemAvailable from /proc/meminfo (Linux); None elsewhere."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def fusion_by_tenant(conn: psycopg.Connection, base: FusionConfig) -> list[tuple[str, FusionConfig]]:
    """The fusion each tenant's searches use: ``base`` (the settings'), then each tenant with
    stored defaults over it (``ragline status``'s fusion table)."""
    stored = fusion_repo.all_tenant_defaults(conn)
    return [("(settings)", base)] + [(tenant, base.merged(o)) for tenant, o in stored.items()]

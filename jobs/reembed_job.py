"""Model migration: re-embed every live chunk into a new index version, gate it, swap it.

``services.migration.start_reembed`` records the job and the active migration (from then on
ingestion writes vectors for the target model too: ``jobs.dual_write``); ``run_reembed``, the
worker, backfills the
vectors still missing, builds the target version from the catalog at one position, gates
it (``jobs.reembed_gate``) and, on a pass (or ``force``), swaps the alias atomically. The
old version keeps serving until then, and after it for the grace period (the rollback is
``ragline index swap``). The backfill is resumable: it embeds only chunks that still have
no vector for the target model, and commits every batch.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from catalog import audit
from catalog import chunkings as chunkings_repo
from catalog import indexes as indexes_repo
from catalog import jobs as jobs_repo
from catalog import maintenance as maintenance_repo
from catalog import reembed as reembed_repo
from core.errors import CapacityError
from index.capacity import estimate_capacity, model_weight_bytes
from index.embedder import EmbeddingSpec, resolve_model_path
from index.faiss_shards import choose_kind
from ingest.pipeline import ChunkingConfig
from jobs import reembed_gate as gate
from jobs.rebuild_job import RebuildConfig, build_snapshot, snapshot
from jobs.reembed_backfill import Backfill, Priority
from jobs.reembed_gate import GateConfig, SearchOpener

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReembedArgs:
    """What a caller asks for (CLI flags, the API body, a stored schedule): JSON-able."""

    model: str
    chunking: str | None = None  # "TOKENS/OVERLAP": re-chunk from the stored parsed text too
    index_kind: str | None = None
    shards: int | None = None
    gate_dataset: str | None = None
    gate_tolerance: float | None = None
    query_file: str | None = None
    force: bool = False

    def to_params(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> ReembedArgs:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in params.items() if k in names})


@dataclass(frozen=True, slots=True)
class ReembedConfig:
    """How to run a migration; ``wiring.reembed.reembed_config`` fills it from the settings."""

    args: ReembedArgs
    target: EmbeddingSpec  # the target model (its name is what chunk_embeddings records)
    build: RebuildConfig  # model_name is the target's
    chunking: ChunkingConfig | None  # new chunk settings, or None to keep every document's chunks
    gate: GateConfig
    open_search: SearchOpener
    alias: str
    live_model: str  # the configured model, when the alias has no version yet
    batch_chunks: int
    actors: int
    priority: Priority
    nice: int
    threads: int
    cpus: tuple[int, ...] | None
    use_ray: bool
    ray_address: str | None
    data_dir: Path
    ram_budget_bytes: int | None
    disk_budget_bytes: int | None
    tenant_id: str  # the job is recorded under this tenant
    actor: str  # who started it (audit: and who forced it)
    lease_seconds: float  # a migration silent this long (its process died) may be taken over
    via: str = "cli"  # the path that started or runs it (audit: api, cli, scheduler)
    # The serving query encoder's weights; the gate's searches (both versions) embed at it.
    query_precision: str = "fp32"


class Cancelled(Exception):
    pass


# --- start ----------------------------------------------------------------------------------


def capacity_check(conn: psycopg.Connection, config: ReembedConfig, *, target_dim: int) -> dict[str, Any]:
    """RAM and disk for the live and the target version side by side, plus both query models.

    Raises ``CapacityError`` with the numbers when a configured budget cannot hold both.
    """
    live = indexes_repo.resolve_alias(conn, alias=config.alias)
    n = maintenance_repo.all_live_leaf_count(conn)
    live_dim = live.dim if live else target_dim
    ix = config.build
    per_shard = max(1, n // ix.n_shards)
    kind = config.build.force_kind or choose_kind(
        per_shard, flat_max=ix.flat_max_vectors, ivfpq_min=ix.ivfpq_min_vectors
    )
    old = estimate_capacity(n, live_dim, kind=kind, hnsw_m=ix.dense.hnsw_m, pq_m=ix.dense.pq_m)
    new = estimate_capacity(n, target_dim, kind=kind, hnsw_m=ix.dense.hnsw_m, pq_m=ix.dense.pq_m)
    models = model_weight_bytes(resolve_model_path(live.embedding_model if live else config.live_model))
    models += model_weight_bytes(resolve_model_path(config.target.model_name))
    ram = old.serve_ram_bytes + new.serve_ram_bytes + models
    disk = old.disk_bytes + new.disk_bytes
    report: dict[str, Any] = {
        "chunks": n,
        "kind": kind,
        "ram_bytes": ram,
        "disk_bytes": disk,
        "query_models_ram_bytes": models,
        "ram_budget_bytes": config.ram_budget_bytes,
        "disk_budget_bytes": config.disk_budget_bytes,
    }
    over = []
    if config.ram_budget_bytes is not None and ram > config.ram_budget_bytes:
        over.append(f"RAM {ram} > budget {config.ram_budget_bytes} bytes")
    if config.disk_budget_bytes is not None and disk > config.disk_budget_bytes:
        over.append(f"disk {disk} > budget {config.disk_budget_bytes} bytes")
    if over:
        raise CapacityError(
            f"two index versions of {n} chunks ({live_dim}-d and {target_dim}-d, {kind}) plus two"
            f" query models ({models} bytes) do not fit: " + "; ".join(over)
        )
    return report


# --- run ------------------------------------------------------------------------------------


class _Progress:
    """Job counters in chunks (total = live leaf chunks, done = those with a target vector)."""

    def __init__(
        self,
        conn: psycopg.Connection,
        job_id: uuid.UUID,
        model: str,
        report: Callable[[int, int], None] | None,
    ) -> None:
        self.conn, self.job_id, self.model, self.report = conn, job_id, model, report
        self.total = maintenance_repo.all_live_leaf_count(conn)
        self.done = self.total - reembed_repo.missing_count(conn, model=model)
        self._update(0)

    def _update(self, new: int) -> None:
        with self.conn.transaction():
            cancel = jobs_repo.set_progress(
                self.conn, job_id=self.job_id, total=self.total, done=self.done, add_chunks=new
            )
        if cancel:
            raise Cancelled

    def __call__(self, new: int) -> None:
        self.done = min(self.total, self.done + new)
        self._update(new)
        if self.report is not None:
            self.report(new, new)


MAX_BUILD_TRIES = 5


def _build_complete(
    conn: psycopg.Connection, config: ReembedConfig, backfill: Backfill, progress: _Progress
) -> tuple[str, int]:
    """Snapshot, backfilling again while chunks written meanwhile still lack a vector; build."""
    for _ in range(MAX_BUILD_TRIES):
        snap = snapshot(conn, model=config.target.model_name)
        conn.commit()
        if len(snap.rows) == snap.live_chunks and backfill.stale(conn) == 0:
            return build_snapshot(conn, config.build, snap), snap.live_chunks
        backfill.rechunk(conn)
        backfill.run(conn, progress)
    raise RuntimeError(f"chunks kept arriving without {config.target.model_name} vectors; retry the job")


def _run_gate(
    conn: psycopg.Connection, config: ReembedConfig, target_id: str, live_chunks: int
) -> dict[str, Any]:
    target = indexes_repo.get_version(conn, version_id=target_id)
    live = indexes_repo.resolve_alias(conn, alias=config.alias)
    assert target is not None
    result: dict[str, Any] = {
        "target_version": target_id,
        "live_version": live.version_id if live else None,
        "query_precision": config.query_precision,
        "completeness": gate.completeness(conn, target, live_chunks=live_chunks),
        "index_quality": gate.index_recall(
            target, sample=config.gate.recall_sample, floor=config.gate.recall_floor
        ),
    }
    conn.commit()
    g = config.gate
    result["space_health"] = gate.space_health(conn, live, target, g)
    if live is not None:  # the label-free checks run on every migration
        with config.open_search(live.version_id) as old, config.open_search(target_id) as new:
            result["structure"], result["agreement"] = gate.structure_and_agreement(old, new, g, conn)
            if g.dataset is not None or g.query_file is not None or g.audit_queries:
                result["retrieval_quality"] = gate.retrieval_quality(old, new, g)
                result["query_sample"] = gate.query_overlap(old, new, g, conn)
    failed = [
        name
        for name in (
            "completeness",
            "index_quality",
            "retrieval_quality",
            "structure",
            "agreement",
            "space_health",
        )
        if isinstance(result.get(name), dict) and not result[name]["passed"]
    ]
    result["passed"] = not failed
    result["failed"] = failed
    return result


def run_reembed(
    conninfo: str,
    job_id: uuid.UUID,
    config: ReembedConfig,
    *,
    on_progress: Callable[[int, int], None] | None = None,
    owner: str | None = None,
    force_claim: bool = False,
) -> str | None:
    """Run (or resume) a migration job to its end; returns its state (None: held elsewhere)."""
    owner = owner or f"reembed:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        claimed = jobs_repo.claim_job(
            conn, job_id=job_id, owner=owner, lease_seconds=config.lease_seconds, force=force_claim
        )
        if not claimed:
            return None
        conn.autocommit = False
        job = jobs_repo.get_job(conn, job_id=job_id)
        report: dict[str, Any] = dict((job.params.get("report") or {}) if job else {})
        backfill = Backfill(config)
        state, error = "failed", None
        try:
            state = _migrate(conn, job_id, config, backfill, report, on_progress)
        except Cancelled:
            state = "cancelled"
        except Exception as exc:  # recorded on the job; the old version keeps serving
            log.exception("migration %s failed", job_id)
            error = f"{type(exc).__name__}: {exc}"[:500]
        finally:
            backfill.close()
        report["embedded_this_run"] = backfill.encoded
        with conn.transaction():
            jobs_repo.set_report(conn, job_id=job_id, report=report)
            jobs_repo.end_job(conn, job_id=job_id, state=state, error=error or report.get("error"))
            reembed_repo.finish_migration(
                conn,
                job_id=job_id,
                report=report,
                target_version=report.get("gate", {}).get("target_version"),
            )
        log.info("migration %s finished: %s", job_id, state)
        return state


def _migrate(
    conn: psycopg.Connection,
    job_id: uuid.UUID,
    config: ReembedConfig,
    backfill: Backfill,
    report: dict[str, Any],
    on_progress: Callable[[int, int], None] | None,
) -> str:
    model = config.target.model_name
    progress = _Progress(conn, job_id, model, on_progress)
    report["resumed_with_vectors"] = progress.done
    backfill.rechunk(conn)
    started, loaded_before = time.monotonic(), backfill.startup_seconds
    written = backfill.run(conn, progress)
    # The model load (and actor start) is reported apart from the embedding rate.
    seconds = time.monotonic() - started - (backfill.startup_seconds - loaded_before)
    report["backfill"] = {
        "written": written,
        "startup_seconds": round(backfill.startup_seconds, 2),
        "seconds": round(seconds, 2),
        "chunks_per_s": round(written / max(1e-6, seconds), 2),
        "embedding_window": backfill.embedding_window,
    }
    target_id, live_chunks = _build_complete(conn, config, backfill, progress)
    if config.chunking is not None:
        report["rechunk"] = {"chunking": config.chunking.label, **backfill.rechunked.as_json()}
    result = _run_gate(conn, config, target_id, live_chunks)
    report["gate"] = result
    with conn.transaction():
        reembed_repo.write_gate_report(conn, version_id=target_id, gate=result)
        jobs_repo.set_report(conn, job_id=job_id, report=report)
    if not result["passed"] and not config.args.force:
        report["error"] = "gate failed: " + ", ".join(result["failed"]) + f"; {config.alias} not moved"
        return "failed"
    backfill.rechunk(conn)  # documents written since the snapshot: the new delta needs them
    backfill.run(conn, progress)
    with conn.transaction():
        previous = indexes_repo.swap_alias(conn, alias=config.alias, version_id=target_id)
        # Documents written between the last re-chunk pass and this swap: named, not lost.
        aligned = chunkings_repo.align_to_version(conn, version_id=target_id)
        audit.record(
            conn,
            actor=config.actor,
            action="reembed.swap",
            tenant_id=config.tenant_id,
            target=config.alias,
            details={
                "job_id": str(job_id),
                "from": previous,
                "to": target_id,
                "model": model,
                "gate_passed": result["passed"],
                "forced": not result["passed"],
                "via": config.via,
                **({"chunking": aligned.as_json()} if aligned and (aligned.restored or aligned.kept) else {}),
            },
        )
    report["swapped"] = {
        "from": previous,
        "to": target_id,
        "forced_by": None if result["passed"] else config.actor,
    }
    return "succeeded"


class ReembedWorker:
    """Runs migration jobs started through the API on a background thread each."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Nothing runs until a job is submitted; a crashed one resumes with ``ragline jobs resume``."""

    def submit(self, job_id: uuid.UUID, config: ReembedConfig) -> None:
        thread = threading.Thread(
            target=self._run, args=(job_id, config), name=f"reembed-{str(job_id)[:8]}", daemon=True
        )
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _run(self, job_id: uuid.UUID, config: ReembedConfig) -> None:
        try:
            run_reembed(self.conninfo, job_id, config)
        except Exception:  # the worker thread must not die silently
            log.exception("migration %s crashed", job_id)

    def wait(self, timeout: float | None = None) -> None:
        for thread in list(self._threads):
            thread.join(timeout)

    def close(self) -> None:
        """Leaves running migrations to finish or be resumed; their lease expires in 60 s."""

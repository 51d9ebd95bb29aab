"""Model migrations from the settings: the job's config and the gate's search services."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import psycopg
from psycopg_pool import ConnectionPool

from catalog import indexes as indexes_repo
from core.errors import InvalidInputError, NotFoundError
from core.settings import IngestSettings, Settings
from index.faiss_shards import DenseKind
from ingest.pipeline import ChunkingConfig
from jobs.reembed_gate import GateConfig, SearchOpener
from jobs.reembed_job import ReembedArgs, ReembedConfig
from retrieve.service import SearchService
from services.migration import start_reembed
from services.schedules import ScheduleRunner
from wiring.embedding import embedding_spec, query_embedding_spec
from wiring.index import LIVE_ALIAS, rebuild_config
from wiring.ingest import chunking_config
from wiring.search import build_search_service

INDEX_KINDS = ("flat", "hnsw", "ivfpq")


def parse_chunking(value: str | None, settings: Settings) -> ChunkingConfig | None:
    """``TOKENS/OVERLAP`` (e.g. ``128/16``) within the ingest settings' limits."""
    if value is None:
        return None
    tokens, _, overlap = value.partition("/")
    try:
        config = IngestSettings(chunk_tokens=int(tokens), chunk_overlap=int(overlap or 0))
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise InvalidInputError(
            f"chunking must be TOKENS/OVERLAP with 16 <= TOKENS <= 8192 and OVERLAP < TOKENS: {value!r}"
        ) from exc
    return replace(
        chunking_config(settings), chunk_tokens=config.chunk_tokens, overlap_tokens=config.chunk_overlap
    )


def version_search_opener(settings: Settings, url: str) -> SearchOpener:
    """Search services over one version each, through the real request path (gate only)."""

    @contextmanager
    def open_version(version_id: str) -> Iterator[SearchService]:
        alias = f"gate-{version_id}"
        with psycopg.connect(url, autocommit=True) as conn:
            row = indexes_repo.get_version(conn, version_id=version_id)
            if row is None:
                raise NotFoundError(f"no index version {version_id}")
            indexes_repo.swap_alias(conn, alias=alias, version_id=version_id)
        pool = ConnectionPool(url, min_size=1, max_size=4, open=True)
        try:
            # At the serving query precision: the gate measures what the swap would serve.
            embedder = query_embedding_spec(settings).for_model(row.embedding_model).load()
            service, close = build_search_service(settings, pool, embedder, alias=alias, watch=False)
            try:
                yield service
            finally:
                close()
        finally:
            pool.close()
            with psycopg.connect(url, autocommit=True) as conn:
                indexes_repo.drop_alias(conn, alias=alias)

    return open_version


def reembed_config(
    settings: Settings,
    url: str,
    args: ReembedArgs,
    *,
    actor: str,
    tenant_id: str | None = None,
    use_ray: bool | None = None,
    via: str = "cli",
) -> ReembedConfig:
    """The migration ``args`` asks for, with everything else from ``settings.reembed``
    (``use_ray`` None: ``reembed.use_ray``)."""
    r = settings.reembed
    if args.index_kind is not None and args.index_kind not in INDEX_KINDS:
        raise InvalidInputError(f"index kind must be one of {', '.join(INDEX_KINDS)}")
    dataset = Path(args.gate_dataset) if args.gate_dataset else None
    if dataset is not None and not r.gate_tenant:
        raise InvalidInputError(
            "a gate dataset needs RAGLINE_REEMBED__GATE_TENANT (the tenant holding its corpus)"
        )
    model = str(Path(args.model).resolve()) if Path(args.model).is_dir() else args.model
    build = rebuild_config(settings, shards=args.shards)
    build = replace(
        build,
        model_name=model,
        force_kind=cast(DenseKind, args.index_kind) if args.index_kind else build.force_kind,
    )
    return ReembedConfig(
        args=replace(args, model=model),
        target=replace(
            embedding_spec(settings, batch_size=r.batch_chunks).for_model(model), threads=r.threads
        ),
        build=build,
        chunking=parse_chunking(args.chunking, settings),
        gate=_gate_config(settings, args, dataset),
        open_search=version_search_opener(settings, url),
        alias=LIVE_ALIAS,
        live_model=settings.embedding_model,
        query_precision=settings.embedding_query_precision,
        batch_chunks=r.batch_chunks,
        actors=r.actors,
        priority=r.priority,
        nice=r.nice,
        threads=r.threads,
        cpus=tuple(r.cpus) if r.cpus else None,
        use_ray=r.use_ray if use_ray is None else use_ray,
        ray_address=settings.ray_address,
        lease_seconds=settings.ingest.job_lease_seconds,
        data_dir=settings.data_dir,
        ram_budget_bytes=r.ram_budget_bytes,
        disk_budget_bytes=r.disk_budget_bytes,
        tenant_id=tenant_id or r.job_tenant,
        via=via,
        actor=actor,
    )


def _gate_config(settings: Settings, args: ReembedArgs, dataset: Path | None) -> GateConfig:
    """The gate a migration's version must pass: ``settings.reembed`` unless ``args`` says."""
    r = settings.reembed
    return GateConfig(
        recall_floor=r.recall_floor,
        recall_sample=r.recall_sample,
        dataset=dataset,
        dataset_tenant=r.gate_tenant,
        tolerance=args.gate_tolerance if args.gate_tolerance is not None else r.gate_tolerance,
        mode=r.gate_mode,
        query_file=Path(args.query_file) if args.query_file else None,
        query_sample=r.query_sample,
        audit_queries=settings.audit.store_query_text,
        structure_probes=r.structure_probes,
        structure_tolerance=r.structure_tolerance,
        health_pairs=r.health_pairs,
        health_spread_ratio=r.health_spread_ratio,
        agreement_floor=r.agreement_floor,
    )


def scheduled_reembed(settings: Settings, url: str) -> ScheduleRunner:
    """The runner of ``reembed`` schedules: starts the migration job and hands it to its own
    detached process (as ``ragline reembed`` without ``--wait``), so a migration that takes hours
    never holds the maintenance loop or its lock."""

    def run(params: Mapping[str, Any]) -> str:
        args = ReembedArgs.from_params(params)
        config = reembed_config(settings, url, args, actor="schedule", via="scheduler")
        job_id = start_reembed(url, config)
        log_path = spawn_resume(settings, job_id, args.model, use_ray=config.use_ray)
        return f"started reembed job {job_id} to {config.target.model_name} (log {log_path})"

    return run


def spawn_resume(settings: Settings, job_id: object, model: str, *, use_ray: bool) -> Path:
    """Run a started migration job in its own detached process (``ragline reembed --resume``),
    which outlives this one; returns the log file it writes."""
    log_path = settings.log_dir / f"reembed-{job_id}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "cli.main", "reembed", "--model", model, "--resume", str(job_id)]
    with log_path.open("ab") as out:
        subprocess.Popen(
            cmd + ([] if use_ray else ["--no-ray"]), stdout=out, stderr=out, start_new_session=True
        )
    return log_path

"""``ragline reembed``: migrate the corpus to another embedding model, gated, then swapped."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cli.output import operator as _actor
from core.settings import Settings, get_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reembed",
        help="re-embed every live chunk with another model into a new index version, gate it, swap it",
        description="Start a model migration: ingestion writes vectors for both models meanwhile; the"
        " new version is built from the catalog, gated (completeness, ANN recall, nDCG@10 on a gate"
        " dataset, overlap on sample queries) and swapped onto the live alias only when it passes."
        " Exit codes: 0 swapped (or started without --wait), 1 gate failed or job failed, 2 refused.",
    )
    p.add_argument("--model", required=True, help="a sentence-transformers folder or model name")
    p.add_argument("--chunking", metavar="TOKENS/OVERLAP", help="re-chunk from the stored parsed text too")
    p.add_argument("--index-kind", choices=("flat", "hnsw", "ivfpq"), help="every shard of the new version")
    p.add_argument("--shards", type=int, help="shards of the new version (default: index.shards)")
    p.add_argument("--gate-dataset", type=Path, help="BEIR folder; its corpus lives in reembed.gate_tenant")
    p.add_argument(
        "--gate-tolerance", type=float, help="allowed nDCG@10 drop (default reembed.gate_tolerance)"
    )
    p.add_argument("--queries", type=Path, help="sample queries: tenant<TAB>query per line (top-10 overlap)")
    p.add_argument("--tenant", help="the tenant the job is recorded under (default reembed.job_tenant)")
    p.add_argument("--wait", action="store_true", help="run here with a progress bar until the swap")
    p.add_argument("--force", action="store_true", help="swap even when the gate fails (audited)")
    p.add_argument("--no-ray", action="store_true", help="embed in this process instead of Ray actors")
    p.add_argument("--resume", metavar="JOB_ID", help="resume a migration job whose process died")
    p.set_defaults(handler=_reembed)


def run_job(
    settings: Settings, url: str, job_id: str, *, use_ray: bool | None, force_claim: bool
) -> str | None:
    """Run (or resume) a migration job here, with a progress bar; the args come from the job
    (``use_ray`` None: ``reembed.use_ray``)."""
    import uuid

    import psycopg

    from core.progress import Progress
    from jobs.reembed_job import run_reembed
    from services.migration import ReembedArgs, migration_job, missing_vectors
    from wiring.reembed import reembed_config

    with psycopg.connect(url) as conn:
        job = migration_job(conn, uuid.UUID(job_id))
        if job is None:
            raise SystemExit(f"ragline: no migration job {job_id}")
        todo = missing_vectors(conn, model=ReembedArgs.from_params(job.params).model)
    config = reembed_config(
        settings,
        url,
        ReembedArgs.from_params(job.params),
        actor=_actor(),
        tenant_id=job.tenant_id,
        use_ray=use_ray,
    )
    progress = Progress(todo, unit="chunk")
    try:
        return run_reembed(url, job.job_id, config, on_progress=progress, force_claim=force_claim)
    finally:
        progress.close()


def _reembed(args: argparse.Namespace) -> int:
    from catalog.connect import migrated_url
    from services.migration import ReembedArgs, start_reembed
    from wiring.reembed import reembed_config, spawn_resume

    settings = get_settings()
    url = migrated_url(settings)
    if args.resume:
        state = run_job(settings, url, args.resume, use_ray=False if args.no_ray else None, force_claim=True)
        return _report(url, args.resume, state)
    reembed_args = ReembedArgs(
        model=args.model,
        chunking=args.chunking,
        index_kind=args.index_kind,
        shards=args.shards,
        gate_dataset=str(args.gate_dataset.resolve()) if args.gate_dataset else None,
        gate_tolerance=args.gate_tolerance,
        query_file=str(args.queries.resolve()) if args.queries else None,
        force=args.force,
    )
    config = reembed_config(
        settings,
        url,
        reembed_args,
        actor=_actor(),
        tenant_id=args.tenant,
        use_ray=False if args.no_ray else None,
    )
    job_id = str(start_reembed(url, config))
    print(f"job {job_id}: migrating to {config.target.model_name}", file=sys.stderr)
    if not args.wait:
        log = spawn_resume(settings, job_id, args.model, use_ray=config.use_ray)
        print(f"{job_id}\trunning (follow it: ragline jobs show {job_id}; log {log})")
        return 0
    state = run_job(settings, url, job_id, use_ray=config.use_ray, force_claim=False)
    return _report(url, job_id, state)


def _report(url: str, job_id: str, state: str | None) -> int:
    import uuid

    import psycopg

    from services.migration import migration_job

    with psycopg.connect(url) as conn:
        job = migration_job(conn, uuid.UUID(job_id))
    report = dict(job.params.get("report") or {}) if job else {}
    gate = report.get("gate") or {}
    for name in (
        "completeness",
        "index_quality",
        "structure",
        "agreement",
        "space_health",
        "retrieval_quality",
        "query_sample",
    ):
        if isinstance(gate.get(name), dict):
            shown = {k: v for k, v in gate[name].items() if not isinstance(v, dict | list)}
            print(f"  {name}: " + "  ".join(f"{k} {v}" for k, v in shown.items()), file=sys.stderr)
    print(f"{job_id}\t{state or 'not resumable (finished, or held by a live worker)'}")
    if job is not None and job.error:
        print(f"ragline: {job.error}", file=sys.stderr)
    return 0 if state == "succeeded" else 1

"""``ragline ingest`` (the bulk file connector) and ``ragline jobs list|show|resume|cancel``."""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from core.settings import Settings, get_settings

MIME_BY_SUFFIX = {
    ".pdf": "application/pdf",
    ".html": "text/html",
    ".htm": "text/html",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".txt": "text/plain",
    ".text": "text/plain",
    ".rst": "text/plain",
}


def register(sub: argparse._SubParsersAction) -> None:
    ingest = sub.add_parser("ingest", help="ingest files and folders as one job, with a progress bar")
    ingest.add_argument("paths", nargs="+", type=Path)
    ingest.add_argument("--tenant", required=True)
    ingest.add_argument("--acl", default="", help="comma-separated readers, e.g. user:alice,group:eng")
    ingest.add_argument("--public", action="store_true", help="readable by everyone in the tenant")
    ingest.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE")
    ingest.add_argument("--acl-map", type=Path, help="JSON: file name -> {principals, public, metadata}")
    ingest.add_argument("--no-ray", action="store_true", help="run every stage in this process")
    ingest.set_defaults(handler=_ingest)
    jobs = sub.add_parser("jobs", help="ingestion jobs")
    jsub = jobs.add_subparsers(dest="jobs_action", required=True)
    lst = jsub.add_parser("list")
    lst.add_argument("--state")
    lst.set_defaults(handler=_jobs_list)
    for name, handler in (("show", _jobs_show), ("resume", _jobs_resume), ("cancel", _jobs_cancel)):
        p = jsub.add_parser(name)
        p.add_argument("job_id", type=uuid.UUID)
        p.set_defaults(handler=handler)


def walk(paths: list[Path]) -> list[tuple[Path, str]]:
    """Files under ``paths`` with a supported suffix, and the id each gets (its relative path)."""
    found: list[tuple[Path, str]] = []
    for root in paths:
        if root.is_file():
            found.append((root, root.name))
            continue
        for file in sorted(p for p in root.rglob("*") if p.is_file()):
            if file.suffix.lower() in MIME_BY_SUFFIX:
                found.append((file, file.relative_to(root).as_posix()))
    return found


def _items(args: argparse.Namespace) -> list[Any]:
    from catalog.jobs import NewItem
    from core.records import Acl

    meta = dict(kv.split("=", 1) for kv in args.metadata)
    mapping: dict[str, Any] = json.loads(args.acl_map.read_text()) if args.acl_map else {}
    default_acl = Acl(tuple(sorted(p for p in args.acl.split(",") if p)), args.public)
    items = []
    for file, ext_id in walk(args.paths):
        entry = mapping.get(file.name) or mapping.get(ext_id) or {}
        acl_entry = entry.get("acl", entry)
        acl = (
            Acl(tuple(sorted(acl_entry.get("principals", []))), bool(acl_entry.get("public", False)))
            if entry
            else default_acl
        )
        items.append(
            NewItem(
                external_id=ext_id,
                mime_type=MIME_BY_SUFFIX.get(file.suffix.lower(), "text/plain"),
                title=entry.get("title"),
                metadata={**meta, **entry.get("metadata", {})},
                acl=acl,
                payload_path=str(file.resolve()),
                byte_size=file.stat().st_size,
            )
        )
    return items


class Progress:
    """A one-line progress bar on stderr: documents, chunks/s, ETA."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.chunks, self.started = total, 0, 0, time.monotonic()

    def __call__(self, documents: int, chunks: int) -> None:
        self.done += documents
        self.chunks += chunks
        elapsed = max(1e-6, time.monotonic() - self.started)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        filled = int(30 * self.done / max(1, self.total))
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} docs  "
            f"{self.chunks / elapsed:7.1f} chunks/s  ETA {eta:5.0f}s "
        )
        sys.stderr.flush()


def embedding_spec(settings: Settings, *, batch_size: int | None = None) -> Any:
    """The embedder every process builds from these settings (API, CLI, Ray actors)."""
    from index.embedder import EmbeddingSpec
    from index.onnx_export import onnx_cache_dir

    return EmbeddingSpec(
        model_name=settings.embedding_model,
        device=settings.embedding_device,
        backend=settings.embedding_backend,
        onnx_dir=onnx_cache_dir(settings.data_dir.resolve(), settings.embedding_model),
        threads=settings.embedding_threads,
        batch_size=batch_size or settings.ingest.embed_batch_size,
    )


def make_runner(settings: Settings, url: str, *, use_ray: bool = True, embedder: Any = None) -> Any:
    from ingest.pipeline import ChunkingConfig
    from jobs.runner import IngestRunner, RunnerConfig

    spec = embedding_spec(settings)
    config = RunnerConfig(
        conninfo=url,
        model_name=settings.embedding_model,
        chunking=ChunkingConfig(settings.ingest.chunk_tokens, settings.ingest.chunk_overlap),
        data_dir=settings.data_dir,
        inline_max_documents=settings.ingest.inline_max_documents,
        use_ray=use_ray,
        ray_address=settings.ray_address,
        embed_actors=settings.ingest.workers,
        embed_batch=settings.ingest.embed_batch_size,
        embedding=spec,
    )
    return IngestRunner(config, lambda: embedder or spec.load())


def _url(settings: Settings) -> str:
    from catalog.connect import migrated_url

    return migrated_url(settings)


def ingest_paths(args: argparse.Namespace, settings: Settings) -> tuple[str, str | None]:
    """Create the job and run it here; returns (job id, final state)."""
    import psycopg

    from catalog import jobs as jobs_repo
    from catalog import principals as principals_repo

    url = _url(settings)
    items = _items(args)
    if not items:
        raise SystemExit("ragline: no supported files found")
    with psycopg.connect(url) as conn:
        principals_repo.ensure_tenant(conn, tenant_id=args.tenant)
        job_id = jobs_repo.create_job(
            conn,
            tenant_id=args.tenant,
            kind="ingest",
            items=items,
            params={"paths": [str(p) for p in args.paths]},
        )
    print(f"job {job_id}: {len(items)} documents", file=sys.stderr)
    runner = make_runner(settings, url, use_ray=not args.no_ray)
    state = runner.run_job(job_id, on_progress=Progress(len(items)))
    sys.stderr.write("\n")
    return str(job_id), state


def _ingest(args: argparse.Namespace) -> int:
    job_id, state = ingest_paths(args, get_settings())
    print(f"{job_id}\t{state}")
    return 0 if state in ("succeeded", "partially_failed") else 1


def _jobs_list(args: argparse.Namespace) -> int:
    import psycopg

    from catalog import jobs as jobs_repo

    with psycopg.connect(_url(get_settings())) as conn:
        for j in jobs_repo.list_jobs(conn, tenant_id=None, state=args.state):
            print(
                f"{j.job_id}\t{j.tenant_id}\t{j.state}\t"
                f"{j.documents_done}/{j.documents_total}\t{j.chunks} chunks"
            )
    return 0


def _jobs_show(args: argparse.Namespace) -> int:
    import psycopg

    from api.routes.jobs import job_out
    from catalog import jobs as jobs_repo

    with psycopg.connect(_url(get_settings())) as conn:
        job = jobs_repo.get_job(conn, job_id=args.job_id)
        if job is None:
            print("no such job")
            return 1
        print(
            job_out(job, jobs_repo.items(conn, job_id=args.job_id, state="failed")).model_dump_json(indent=2)
        )
    return 0


def _jobs_resume(args: argparse.Namespace) -> int:
    """Finish a job whose process died: only items still pending are redone."""
    settings = get_settings()
    runner = make_runner(settings, _url(settings))
    state = runner.run_job(args.job_id, on_progress=Progress(0), force=True)
    sys.stderr.write("\n")
    print(state or "not resumable (finished, or held by a live worker)")
    return 0 if state else 1


def _jobs_cancel(args: argparse.Namespace) -> int:
    import psycopg

    with psycopg.connect(_url(get_settings())) as conn:
        conn.execute("UPDATE jobs SET cancel_requested = true WHERE job_id = %s", (args.job_id,))
    print("cancel requested")
    return 0

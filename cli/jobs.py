"""``ragline ingest`` (the bulk file connector) and ``ragline jobs list|show|resume|cancel``."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg

from cli.output import add_json_flag, operator, print_json, print_rows
from cli.selection import add_file_flags, file_filter, name_list, skipped_lines
from core.errors import ConflictError, InvalidInputError, NotFoundError
from core.records import Acl
from core.settings import Settings, get_settings
from core.validation import acl_principal, metadata_pair
from ingest.files import MIME_BY_SUFFIX, walk
from services import jobs as jobs_service
from services.caller import Caller
from services.ingest import NewItem, ingest_path


def register(sub: argparse._SubParsersAction) -> None:
    ingest = sub.add_parser(
        "ingest",
        help="ingest files and folders as one job, with a progress bar",
        description="Ingest files and folders as one job. Who may read the documents must be said:"
        " --acl, --public or --acl-map. Hidden files and dot-folders are skipped, and symbolic"
        " links below a folder are never followed (nor a link named directly). Exit codes:"
        " 0 succeeded, 3 partially_failed (some documents failed: see `ragline jobs show`),"
        " 1 failed or cancelled, 2 invalid arguments (a missing path, no file to ingest). A job"
        " another worker runs (a server took it over) is followed to its end: the code is its final state's.",
    )
    ingest.add_argument("paths", nargs="+", type=Path)
    ingest.add_argument("--tenant", required=True)
    readers = ingest.add_mutually_exclusive_group()
    readers.add_argument("--acl", default="", help="comma-separated readers, e.g. user:alice,group:eng")
    readers.add_argument("--public", action="store_true", help="readable by everyone in the tenant")
    ingest.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE")
    ingest.add_argument(
        "--acl-map", type=Path, help="JSON: file name -> {principals, public, metadata} (wins over --acl)"
    )
    add_file_flags(ingest)
    ingest.add_argument("--no-ray", action="store_true", help="run every stage in this process")
    ingest.set_defaults(handler=_ingest)
    jobs = sub.add_parser("jobs", help="ingestion jobs")
    jsub = jobs.add_subparsers(dest="jobs_action", required=True)
    lst = jsub.add_parser("list", help="recent jobs, newest first")
    lst.add_argument("--state")
    lst.add_argument("--tenant")
    add_json_flag(lst)
    lst.set_defaults(handler=_jobs_list)
    show = jsub.add_parser("show", help="one job with its failed items and warnings")
    show.add_argument("job_id", type=uuid.UUID)
    add_json_flag(show)
    show.set_defaults(handler=_jobs_show)
    due = jsub.add_parser("run-due", help="run the schedules that are due now (for an external cron)")
    add_json_flag(due)
    due.set_defaults(handler=_jobs_run_due)
    described = {
        "cancel": "Stop a queued or running job (a running one at its next batch). Exit codes: 0 the"
        " cancel was taken, 1 no such job or it has already ended (its state is printed).",
    }
    for name, handler in (("resume", _jobs_resume), ("cancel", _jobs_cancel)):
        p = jsub.add_parser(name, description=described.get(name))
        p.add_argument("job_id", type=uuid.UUID)
        p.set_defaults(handler=handler)


EXIT_PARTIALLY_FAILED = 3


def _acl(principals: list[str], public: bool) -> Acl:
    return Acl(tuple(sorted({acl_principal(p) for p in principals})), public)


def _check_args(args: argparse.Namespace) -> None:
    """Refuse before any job: a path that does not exist, or no word on who may read."""
    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        raise InvalidInputError(f"no such file or directory: {', '.join(missing)}")
    if not args.acl.strip() and not args.public and args.acl_map is None:
        raise InvalidInputError(
            "say who may read the documents: --acl READERS, --public (the whole tenant) or --acl-map FILE;"
            " a document with no readers is readable by nobody"
        )


def _items(args: argparse.Namespace) -> list[NewItem]:
    _check_args(args)
    meta = dict(metadata_pair(kv) for kv in args.metadata)
    mapping: dict[str, Any] = json.loads(args.acl_map.read_text()) if args.acl_map else {}
    default_acl = _acl([p.strip() for p in args.acl.split(",") if p.strip()], args.public)
    items = []
    walked = walk(args.paths, file_filter(args))
    if args.acl_map is not None:  # the ACL map may sit beside the files it describes
        walked.unsupported[:] = [f for f in walked.unsupported if f.resolve() != args.acl_map.resolve()]
    for line in skipped_lines(walked, args.paths):
        print(line, file=sys.stderr)
    for file, ext_id in walked.found:
        entry = mapping.get(file.name) or mapping.get(ext_id) or {}
        acl_entry = entry.get("acl", entry)
        acl = (
            _acl(list(acl_entry.get("principals", [])), acl_entry.get("public", False) is True)
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
                # No link below the folder was walked, so this names the file itself.
                payload_path=str(file.resolve()),
                byte_size=file.lstat().st_size,
            )
        )
    unreadable = [i.external_id for i in items if not i.acl.principals and not i.acl.public]
    if unreadable:
        print(
            f"warning: {len(unreadable)} documents have no readers (their ACL names nobody and is not"
            f" public), so no query can return them: {name_list(unreadable)}",
            file=sys.stderr,
        )
    return items


def _url(settings: Settings) -> str:
    from catalog.connect import migrated_url

    return migrated_url(settings)


def ingest_paths(args: argparse.Namespace, settings: Settings) -> tuple[str, str]:
    """Create the job and run it here (or follow it where another worker runs it to its
    end); returns (job id, final state)."""
    from core.progress import Progress
    from wiring import make_runner

    url = _url(settings)
    items = _items(args)
    if not items:
        raise InvalidInputError(f"no file to ingest under {', '.join(str(p) for p in args.paths)}")
    with psycopg.connect(url) as conn:
        job_id = ingest_path(conn, caller=_caller(), tenant_id=args.tenant, items=items, paths=args.paths)
    print(f"job {job_id}: {len(items)} documents", file=sys.stderr)
    runner = make_runner(settings, url, use_ray=not args.no_ray)
    progress = Progress(len(items))
    try:
        state = runner.run_to_end(job_id, on_progress=progress)
    finally:
        progress.close()
    return str(job_id), state


def _caller() -> Caller:
    return Caller(operator(), "cli")


def _ingest(args: argparse.Namespace) -> int:
    job_id, state = ingest_paths(args, get_settings())
    print(f"{job_id}\t{state}")
    if state == "partially_failed":
        print(f"some documents failed: ragline jobs show {job_id}", file=sys.stderr)
        return EXIT_PARTIALLY_FAILED
    return 0 if state == "succeeded" else 1


def _jobs_list(args: argparse.Namespace) -> int:
    with psycopg.connect(_url(get_settings())) as conn:
        jobs = jobs_service.list_jobs(conn, tenant_id=args.tenant, state=args.state)
    rows = [
        {
            "job_id": str(j.job_id),
            "tenant_id": j.tenant_id,
            "kind": j.kind,
            "state": j.state,
            "progress": jobs_service.progress_line(
                kind=j.kind,
                state=j.state,
                total=j.documents_total,
                done=j.documents_done,
                failed=j.documents_failed,
            ),
            "unit": jobs_service.job_unit(j.kind),
            "documents_total": j.documents_total,
            "documents_done": j.documents_done,
            "documents_failed": j.documents_failed,
            "chunks": j.chunks,
            "created_at": j.created_at,
            "finished_at": j.finished_at,
        }
        for j in jobs
    ]
    columns = (
        "job_id",
        "tenant_id",
        "kind",
        "state",
        "progress",
        "chunks",
        "created_at",
    )
    print_rows(rows, columns, as_json=args.json, title="jobs")
    return 0


def _jobs_show(args: argparse.Namespace) -> int:
    from api.routes.jobs import job_out

    try:
        with psycopg.connect(_url(get_settings())) as conn:
            detail = jobs_service.get_job(conn, job_id=args.job_id, tenant_id=None)
    except NotFoundError as exc:
        print(f"ragline: {exc.message}", file=sys.stderr)
        return 1
    body = job_out(detail.job, detail.failed, detail.warned).model_dump(mode="json")
    if args.json:
        print_json(body)
        return 0
    print(f"job {body['job_id']}  {body['kind']}  {body['state']}")
    print(f"  {body['progress']}")
    print(f"  {body['unit']}: " + "  ".join(f"{k} {v}" for k, v in body["documents"].items()))
    print(f"  pages {body['pages']}  chunks {body['chunks']}  bytes {body['bytes']}")
    rates = body["throughput"]
    if body["unit"] == "chunks":  # a migration's done count is chunks: its chunks_per_s again
        rates.pop("documents_per_s")
    print("  throughput: " + "  ".join(f"{k} {v:.1f}" for k, v in rates.items()))
    if body.get("eta_seconds") is not None:
        print(f"  ETA {body['eta_seconds']:.0f}s")
    if body.get("report"):
        print("  report: " + json.dumps(body["report"], indent=2, default=str).replace("\n", "\n  "))
    print(f"  created {body['created_at']}  started {body['started_at']}  finished {body['finished_at']}")
    print_rows(
        body["errors"], ("item_no", "external_id", "code", "message"), as_json=False, title="failed items"
    )
    warned = [{**w, "warnings": "; ".join(w["warnings"])} for w in body["warnings"]]
    print_rows(warned, ("item_no", "external_id", "warnings"), as_json=False, title="warnings")
    return 0


def _jobs_resume(args: argparse.Namespace) -> int:
    """Finish a job whose process died, or run a cancelled or failed one again (the API's
    rule, ``reopen_job``): only items that never ran are done now."""
    settings = get_settings()
    with psycopg.connect(_url(settings)) as conn:
        job = jobs_service.find_job(conn, job_id=args.job_id, tenant_id=None)
    if job is None:
        print(f"ragline: no job {args.job_id}", file=sys.stderr)
        return 1
    if job.kind == "reembed":  # a model migration resumes its backfill
        from cli.reembed import run_job

        state = run_job(settings, _url(settings), str(args.job_id), use_ray=None, force_claim=True)
    else:
        try:
            state = _resume_here(settings, args.job_id)
        except (NotFoundError, ConflictError) as exc:
            print(f"ragline: {exc.message}", file=sys.stderr)
            return 1
    print(state or "not resumable (finished, or held by a live worker)")
    return 0 if state else 1


def _resume_here(settings: Settings, job_id: uuid.UUID) -> str | None:
    from core.progress import Progress
    from wiring import make_runner

    def run(job: jobs_service.JobRow) -> str | None:
        runner = make_runner(settings, _url(settings))
        # The whole job's count, starting where earlier runs stopped; rate and ETA are this run's.
        progress = Progress(job.documents_total, done=job.documents_done)
        try:
            return runner.run_job(job_id, on_progress=progress, force=True)
        finally:
            progress.close()

    with psycopg.connect(_url(settings)) as conn:
        return jobs_service.resume_here(conn, caller=_caller(), job_id=job_id, run=run)


def _jobs_cancel(args: argparse.Namespace) -> int:
    """Exit 0 when the cancel was taken (a queued job is cancelled at once, a running one stops
    at its next batch); 1 for no such job or one that has already ended (nothing to stop)."""
    try:
        with psycopg.connect(_url(get_settings())) as conn:
            found = jobs_service.find_job(conn, job_id=args.job_id, tenant_id=None)
            if found is not None and found.state in jobs_service.TERMINAL:
                print(f"ragline: job {found.job_id} has already ended: {found.state}", file=sys.stderr)
                return 1
            job = jobs_service.cancel(conn, caller=_caller(), job_id=args.job_id, tenant_id=None)
    except NotFoundError as exc:
        print(f"ragline: {exc.message}", file=sys.stderr)
        return 1
    print(f"cancel requested: job {job.job_id} is {job.state}")
    return 0


def _jobs_run_due(args: argparse.Namespace) -> int:
    """Run due schedules under the maintenance lock, so a server's loop and this never overlap."""
    from datetime import UTC, datetime

    from services.schedules import run_due_exclusive
    from wiring.maintenance import schedule_runners

    settings = get_settings()
    url = _url(settings)
    ran = run_due_exclusive(url, now=datetime.now(UTC), runners=schedule_runners(settings, url))
    if ran is None:
        print("another process is running maintenance; nothing run", file=sys.stderr)
        ran = []
    rows = [{"schedule_id": r.schedule_id, "job": r.job, "result": r.result} for r in ran]
    print_rows(rows, ("schedule_id", "job", "result"), as_json=args.json, title="due schedules")
    return 1 if any(r.result.startswith("failed") for r in ran) else 0

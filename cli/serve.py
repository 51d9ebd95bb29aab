"""``ragline serve``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cli.uvicorn_stack import serve_app, uvicorn_stack
from core.settings import get_settings


def register(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="run the HTTP API with uvicorn")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--workers", type=int)
    serve.set_defaults(handler=_serve)
    run = sub.add_parser("run", help="local PostgreSQL + Ray, ingest the sample corpus, serve (make run)")
    run.set_defaults(handler=lambda args: _run())


def _run() -> int:
    from cli.run import run
    from jobs.ray_runtime import quiet_known_notices

    quiet_known_notices()
    return run(get_settings())


def _serve(args: argparse.Namespace) -> int:
    import os

    from catalog.connect import database_url
    from jobs.ray_runtime import quiet_known_notices

    quiet_known_notices()  # ingestion jobs may start Ray inside the server
    settings = get_settings()
    stack = uvicorn_stack(settings)
    print(f"ragline serve: event loop {stack['loop']}, HTTP parser {stack['http']}", file=sys.stderr)
    host = args.host or settings.api.host
    port = args.port or settings.api.port
    workers = args.workers or settings.api.workers
    url = database_url(settings)
    # Workers are separate processes that build the app from the environment: hand them the
    # resolved URL so none of them tries to start a second local cluster.
    os.environ["RAGLINE_DATABASE_URL"] = url
    get_settings.cache_clear()  # the app factory must see the resolved URL
    if workers > 1 and settings.metrics.enabled:
        _multiprocess_metrics(settings.metrics_dir)
    serve_app(stack, host, port, workers)
    return 0


def _multiprocess_metrics(path: Path) -> None:
    """prometheus-client's multiprocess mode: workers write their samples under ``path``,
    which ``/metrics`` merges. Set before a worker imports prometheus-client; emptied at
    start so a previous run's counters do not carry over."""
    import os
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path.resolve())

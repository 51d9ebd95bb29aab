"""``ragline serve``."""

from __future__ import annotations

import argparse

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

    return run(get_settings())


def _serve(args: argparse.Namespace) -> int:
    import os

    import uvicorn

    from catalog.connect import database_url

    settings = get_settings()
    host = args.host or settings.api.host
    port = args.port or settings.api.port
    workers = args.workers or settings.api.workers
    url = database_url(settings)
    # Workers are separate processes that build the app from the environment: hand them the
    # resolved URL so none of them tries to start a second local cluster.
    os.environ["RAGLINE_DATABASE_URL"] = url
    get_settings.cache_clear()  # the app factory must see the resolved URL
    uvicorn.run("api.main:build", factory=True, host=host, port=port, workers=workers, log_level="warning")
    return 0

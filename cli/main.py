"""The ``ragline`` command: each module of ``cli/`` registers one command group."""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import cli.connect_sources
from cli import audit, connect, db, evaluate, index, jobs, keys, reembed, reranker, schedule, serve, status
from core.errors import RaglineError

# each defines register(subparsers); heavy imports stay inside the handlers
_GROUPS = (db, keys, serve, jobs, schedule, index, evaluate, reranker, reembed, connect, audit, status)
# git, sql and imap: added under `ragline connect`, so registered after it
_GROUPS_AFTER = (cli.connect_sources,)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragline", description="ragline: RAG ingestion and retrieval")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (*_GROUPS, *_GROUPS_AFTER):
        group.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # platformdirs (pulled in by a dependency) warns on every run where XDG_RUNTIME_DIR is unset.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
    # No tqdm bars from Hugging Face libraries ("Loading weights" on every model load): set
    # before they are imported (they read it once), inherited by uvicorn and Ray workers.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.handler(args)
    except RaglineError as exc:
        print(f"ragline: error: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return int(result or 0)


if __name__ == "__main__":
    raise SystemExit(main())

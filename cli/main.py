"""The ``ragline`` command: each module of ``cli/`` registers one command group."""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import cli.connect_sources
from cli import (
    adapt,
    audit,
    connect,
    db,
    evaluate,
    index,
    jobs,
    keys,
    purge,
    reembed,
    reranker,
    schedule,
    serve,
    status,
    tune,
)
from core.errors import RaglineError

# each defines register(subparsers); heavy imports stay inside the handlers
_GROUPS = (
    db, keys, serve, jobs, schedule, index, evaluate, reranker, reembed, connect, audit, status, purge, tune,
    adapt,
)  # fmt: skip
# Commands that may start a local Ray in this process (ingest, jobs resume, index rebuild,
# reembed): Ray's known-harmless C++ notices are dropped from their stderr, as `serve` and
# `run` do (jobs/ray_runtime.py HARMLESS_NOTICES); progress bars still reach the terminal.
# git, sql and imap: added under `ragline connect`, so registered after it
_GROUPS_AFTER = (cli.connect_sources,)
_RAY_COMMANDS = frozenset({"ingest", "jobs", "index", "reembed"})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragline", description="ragline: RAG ingestion and retrieval")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (*_GROUPS, *_GROUPS_AFTER):
        group.register(sub)
    return parser


# What a shell reports for a process killed by SIGPIPE (128 + 13): `ragline jobs list | head`.
EXIT_BROKEN_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code. Output piped to a reader that stops early (``head``)
    ends the command quietly with 141, for every command alike (the recipe of the Python
    docs' "Note on SIGPIPE")."""
    try:
        try:
            return _main(argv)
        finally:  # buffered output reaches a closed pipe here, not at interpreter exit
            sys.stdout.flush()
    except BrokenPipeError:
        _stdout_to_devnull()
        return EXIT_BROKEN_PIPE


def _stdout_to_devnull() -> None:
    """Point fd 1 at /dev/null, so the interpreter's last flush of stdout has nowhere to fail."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor (a test's capture)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _main(argv: list[str] | None) -> int:
    # platformdirs (pulled in by a dependency) warns on every run where XDG_RUNTIME_DIR is unset.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
    # No tqdm bars from Hugging Face libraries ("Loading weights" on every model load): set
    # before they are imported (they read it once), inherited by uvicorn and Ray workers.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    # Only where this process owns its stderr: a caller that replaced sys.stderr (a test
    # harness capturing output, a program embedding the CLI) keeps its fd 2 as it is.
    if args.command in _RAY_COMMANDS and sys.stderr is sys.__stderr__:
        from jobs.ray_runtime import quiet_known_notices

        quiet_known_notices()
    try:
        result = args.handler(args)
    except RaglineError as exc:
        print(f"ragline: error: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        reason = _invalid_settings(exc) or _database_unreachable(exc)
        if reason is None:
            raise
        print(f"ragline: error: {reason}", file=sys.stderr)
        return 2
    return int(result or 0)


def _invalid_settings(exc: Exception) -> str | None:
    """The settings' validation errors, one line per variable (no traceback), else None."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError) or exc.title != "Settings":
        return None
    lines = []
    for error in exc.errors():
        if error["loc"]:  # a field: its variable and the value given
            name = "RAGLINE_" + "__".join(str(part) for part in error["loc"]).upper()
            lines.append(f"  {name}: {error['msg']} (got {error['input']!r})")
        else:  # a check across fields: its message names them
            lines.append(f"  {error['msg']}")
    return "invalid configuration:\n" + "\n".join(lines)


def _database_unreachable(exc: Exception) -> str | None:
    """A one-line message for a PostgreSQL that cannot be reached (no traceback), else None."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is None or not isinstance(exc, psycopg.OperationalError):
        return None
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return (
        f"cannot reach PostgreSQL: {first}\n"
        "Check RAGLINE_DATABASE_URL, or `ragline db status` / `ragline db up` for the local cluster."
    )


if __name__ == "__main__":
    raise SystemExit(main())

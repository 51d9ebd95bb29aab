"""The ``ragline`` command. Each package registers its own subcommands; imports are lazy so
``ragline db status`` does not load torch or Ray."""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from core.errors import RaglineError

# package module -> it defines register(subparsers)
_COMMAND_MODULES = (
    "catalog.commands",
    "authz.commands",
    "api.commands",
    "jobs.commands",
    "index.commands",
    "bench.commands",
    "rerank.commands",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragline", description="ragline: RAG ingestion and retrieval")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # that package has no commands yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # platformdirs (pulled in by a dependency) warns on every run where XDG_RUNTIME_DIR is unset.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
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

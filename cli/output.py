"""How read commands print: a readable table, or ``--json`` for scripts."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table


def operator() -> str:
    """Who a command acts as in the audit log: the operator's login."""
    return f"operator:{getpass.getuser()}"


def at_least(low: int) -> type[int]:
    """An argparse ``type``: an int no lower than ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an int: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}")
        return value

    return parse  # type: ignore[return-value]


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (tuple, frozenset, set)):
        return list(value)
    return str(value) if not isinstance(value, (str, int, float, bool, list, dict, type(None))) else value


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=_plain))


def print_rows(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, as_json: bool, title: str = ""
) -> None:
    """``rows`` as a JSON list (every key) or a table of ``columns``."""
    if as_json:
        print_json([dict(r) for r in rows])
        return
    if not rows:
        print(f"no {title or 'rows'}")
        return
    table = Table(title=title or None, show_edge=False, header_style="bold")
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*("" if r.get(c) is None else _cell(r.get(c)) for c in columns))
    # Piped output keeps one line per row (no folding at 80 columns).
    Console(width=None if sys.stdout.isatty() else 400).print(table)


def _cell(value: Any) -> str:
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)

"""What a ``ragline connect`` run prints: the summary line (text, or one JSON object with
``--json``) on stdout; on stderr each failure, the items still failing from earlier runs
(once in a line, not again as failures), and the documents the server warned about.

Warnings are per document, the first ``SHOWN`` by id, then a count of the rest, in text and
in JSON alike (``"warnings": {"documents": N, "shown": {id: "code: ...; ..."}}``), so a run
over a share of 10,000 decoded Latin-1 files stays readable.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from ragline_client import SyncReport

SHOWN = 10


def render(report: SyncReport, extra: Mapping[str, Any], *, as_json: bool) -> None:
    """Print ``report`` with ``extra`` summary fields (``skipped``) after its counts."""
    warned = sorted(report.warnings)
    shown = {ext: report.warnings[ext] for ext in warned[:SHOWN]}
    summary: dict[str, Any] = {**report.summary(), **extra}
    if as_json:
        print(json.dumps({**summary, "warnings": {"documents": len(warned), "shown": shown}}), flush=True)
    else:
        fields = [_field(k, v) for k, v in summary.items()] + [f"warnings {len(warned)}"]
        print("  ".join(fields), flush=True)
    for external_id, message in sorted(report.errors.items()):
        print(f"  failed {external_id}: {message}", file=sys.stderr)
    for line in still_failing_lines(report):
        print(line, file=sys.stderr)
    for external_id, message in shown.items():
        print(f"  warning {external_id}: {message}", file=sys.stderr)
    if len(warned) > SHOWN:
        print(f"  ... and {len(warned) - SHOWN} more documents with warnings", file=sys.stderr)


def still_failing_lines(report: SyncReport) -> list[str]:
    """``1 item still failing since 2026-12-07T10:05:54Z, unchanged; not retried ...`` and
    the first ``SHOWN`` of them with their reason codes."""
    failing = report.still_failing
    if not failing:
        return []
    since = min(r.since for r in failing.values())
    noun = "item" if len(failing) == 1 else "items"
    lines = [
        f"  {len(failing)} {noun} still failing since {since}, unchanged; not retried"
        " (--retry-failed sends them again)"
    ]
    lines += [f"    {ext}: {failing[ext].code}" for ext in sorted(failing)[:SHOWN]]
    if len(failing) > SHOWN:
        lines.append(f"    ... and {len(failing) - SHOWN} more")
    return lines


def _field(key: str, value: int | dict[str, int]) -> str:
    """``pushed 3``, ``acl_updated 1``, ``skipped 2 (hidden 1, excluded 0, unsupported 1)``."""
    if isinstance(value, dict):
        return f"{key} {sum(value.values())} (" + ", ".join(f"{k} {v}" for k, v in value.items()) + ")"
    return f"{key} {value}"

"""``ragline audit``: what was done, by whom, and what each answer used."""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from cli.output import add_json_flag, print_rows
from core.errors import InvalidInputError
from core.settings import get_settings

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def register(sub: argparse._SubParsersAction) -> None:
    audit = sub.add_parser(
        "audit", help="the audit log (retrieves, ingest, deletes, ACL/group/key changes, swaps)"
    )
    audit.add_argument("--since", help="ISO time (2026-12-01T08:00) or an age: 30s, 15m, 2h, 7d")
    audit.add_argument("--principal", help="the acting principal or the one searched on behalf of")
    audit.add_argument("--action", help="retrieve, ingest.push, document.delete, index.swap, ...")
    audit.add_argument("--tenant")
    audit.add_argument("--limit", type=int, default=50)
    add_json_flag(audit)
    audit.set_defaults(handler=_audit)


def parse_since(value: str | None, *, now: datetime | None = None) -> datetime | None:
    """An ISO time (local when naive) or an age like ``15m`` before ``now``."""
    if value is None:
        return None
    now = now or datetime.now().astimezone()
    match = _RELATIVE.match(value.strip())
    if match:
        return now - timedelta(**{_UNITS[match[2]]: float(match[1])})
    try:
        at = datetime.fromisoformat(value)
    except ValueError as exc:
        raise InvalidInputError(f"--since: not an ISO time or an age like 15m: {value!r}") from exc
    return at if at.tzinfo else at.astimezone()


def _summary(action: str, details: dict[str, Any]) -> str:
    if action == "retrieve":
        return f"{len(details.get('chunk_ids', []))} results, {details.get('latency_ms')} ms"
    return json.dumps(details, sort_keys=True)[:120]


def _audit(args: argparse.Namespace) -> int:
    import psycopg

    from catalog.connect import migrated_url
    from services.tenants import audit_entries

    with psycopg.connect(migrated_url(get_settings())) as conn:
        rows = audit_entries(
            conn,
            since=parse_since(args.since),
            principal=args.principal,
            action=args.action,
            tenant_id=args.tenant,
            limit=args.limit,
        )
    if args.json:
        print_rows([asdict(r) for r in rows], (), as_json=True)
        return 0
    table = [
        {
            "at": r.at,
            "action": r.action,
            "tenant": r.tenant_id,
            "actor": r.actor,
            "on_behalf_of": r.details.get("on_behalf_of"),
            "target": r.target,
            "version": r.details.get("index_version"),
            "chunk_ids": r.details.get("chunk_ids"),
            "summary": _summary(r.action, r.details),
        }
        for r in rows
    ]
    columns = ("at", "action", "tenant", "actor", "on_behalf_of", "target", "version", "chunk_ids", "summary")
    print_rows(table, columns, as_json=False, title="audit entries")
    return 0

"""``ragline purge``: erase one document now (an erasure request), audited."""

from __future__ import annotations

import argparse
import json

from cli.output import operator
from core.settings import get_settings


def register(sub: argparse._SubParsersAction) -> None:
    purge = sub.add_parser(
        "purge",
        help="delete a document and purge its text, vectors, parsed text and every job item that"
        " carried it (an id that never committed too) now; rebuild live without it",
    )
    purge.add_argument("--tenant", required=True)
    purge.add_argument("--external-id", required=True)
    purge.add_argument(
        "--no-rebuild",
        action="store_true",
        help="leave the index files to the next maintenance tick (it rebuilds a live version"
        " older than the purge)",
    )
    purge.add_argument(
        "--compact",
        action="store_true",
        help="then rewrite the catalog tables that held it and the planner statistics (VACUUM FULL:"
        " locks each table while it runs) and retire the WAL written so far (pg_switch_wal,"
        " CHECKPOINT), so no byte of the purged rows stays in PostgreSQL's files",
    )
    purge.add_argument("--json", action="store_true", help="print the result as JSON")
    purge.set_defaults(handler=_purge)


def _purge(args: argparse.Namespace) -> int:
    import psycopg

    from catalog.connect import migrated_url
    from services.caller import Caller
    from services.tenants import erase_document
    from wiring import rebuild_config
    from wiring.index import LIVE_ALIAS

    settings = get_settings()
    url = migrated_url(settings)
    with psycopg.connect(url, autocommit=True) as conn:
        done = erase_document(
            conn,
            url,
            Caller(operator(), "cli"),
            None if args.no_rebuild else rebuild_config(settings),
            tenant_id=args.tenant,
            external_id=args.external_id,
            alias=LIVE_ALIAS,
            compact=args.compact,
            upload_dir=settings.upload_dir,
        )
    out = {
        "external_id": done.external_id,
        "deleted_now": done.deleted_now,
        "versions": done.counts.versions,
        "chunks": done.counts.chunks,
        "job_items": done.counts.job_payloads,
        "rebuilt": done.rebuilt,
        "pinned": [
            {"alias": p.alias, "version": p.version_id, "rollback": p.rollback, "serves": p.serves}
            for p in done.pinned
        ],
        "compacted": done.compacted,
        "statistics": done.compaction.statistics if done.compaction else False,
        "wal": done.compaction.wal if done.compaction else False,
    }
    if args.json:
        print(json.dumps(out))
        return 0
    print(
        f"purged {out['external_id']}: {out['versions']} versions, {out['chunks']} chunks"
        + (
            f"; {LIVE_ALIAS} now serves {done.rebuilt} (older versions go at the next GC)"
            if done.rebuilt
            else ""
        )
    )
    for p in done.pinned:
        print(_pinned_line(p.alias, p.version_id, rollback=p.rollback, serves=p.serves))
    if done.compaction is not None and not done.compaction.wal:
        print(
            "WAL not retired (this role may not run pg_switch_wal() and CHECKPOINT): the segments"
            " written before the purge hold the text until PostgreSQL recycles them"
        )
    return 0


def _pinned_line(alias: str, version: str, *, rollback: bool, serves: str | None) -> str:
    if rollback:
        return f"alias {alias}: forgot its rollback target {version}, which held the document"
    if serves is not None:
        return f"alias {alias}: moved from {version}, which held the document, to {serves}"
    return (
        f"alias {alias} still points at {version}, which holds the document: rerun without"
        f" --no-rebuild, or move the alias (ragline index swap), then ragline index gc"
    )

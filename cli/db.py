"""``ragline db up|down|status|url`` and ``ragline migrate``."""

from __future__ import annotations

import argparse

from cli.output import add_json_flag, print_json
from core.settings import get_settings


def register(sub: argparse._SubParsersAction) -> None:
    db = sub.add_parser("db", help="the local PostgreSQL cluster (unused when RAGLINE_DATABASE_URL is set)")
    db.add_argument("action", choices=["up", "down", "status", "url"])
    add_json_flag(db)
    db.set_defaults(handler=_db)
    mig = sub.add_parser("migrate", help="apply pending catalog migrations")
    mig.set_defaults(handler=_migrate)


def _db(args: argparse.Namespace) -> int:
    from catalog import embedded
    from catalog.connect import local_cluster
    from catalog.db import redact

    settings = get_settings()
    if settings.database_url:
        if args.action == "url":
            print(settings.database_url)
        else:
            print(f"RAGLINE_DATABASE_URL is set ({redact(settings.database_url)}): nothing to {args.action}")
        return 0
    cluster = local_cluster(settings)
    if args.action == "up":
        print(embedded.up(cluster))
    elif args.action == "down":
        print("stopped" if embedded.down(cluster) else "not running")
    elif args.action == "status":
        # Running: the port it listens on (whatever RAGLINE_PG_PORT says now); stopped: the
        # port the next start tries.
        port = embedded.running_port(cluster)
        running = port is not None
        shown = port if port is not None else cluster.port
        if args.json:
            print_json({"running": running, "pgdata": str(cluster.pgdata), "port": shown})
        else:
            print(f"{'running' if running else 'stopped'}: {cluster.pgdata} (port {shown})")
        return 0 if running else 3
    else:
        print(embedded.current(cluster).url)
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from catalog.connect import database_url
    from catalog.db import apply_migrations

    applied = apply_migrations(database_url(get_settings()))
    print(f"applied {len(applied)} migration(s): {applied}" if applied else "schema up to date")
    return 0

"""``ragline schedule add|list|remove``: cron schedules for rebuild and re-embed jobs.

The servers' maintenance loop runs due schedules (one replica per tick, under its advisory
lock); ``ragline jobs run-due`` does the same from an external cron.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

import psycopg

from cli.output import add_json_flag, operator, print_rows
from core.settings import get_settings


def register(sub: argparse._SubParsersAction) -> None:
    schedule = sub.add_parser("schedule", help="cron schedules for rebuild and reembed jobs")
    ssub = schedule.add_subparsers(dest="schedule_action", required=True)
    add = ssub.add_parser("add", help="add a schedule (cron in UTC)")
    add.add_argument("--cron", required=True, help="five fields, UTC, e.g. '0 3 * * 0' (Sundays 03:00)")
    add.add_argument("--job", required=True, choices=["rebuild", "reembed"])
    add.add_argument(
        "--arg", action="append", default=[], metavar="KEY=VALUE", help="job argument, e.g. shards=4"
    )
    add.set_defaults(handler=_add)
    lst = ssub.add_parser("list", help="schedules with their next and last runs")
    add_json_flag(lst)
    lst.set_defaults(handler=_list)
    rm = ssub.add_parser("remove", help="delete a schedule")
    rm.add_argument("schedule_id", type=int)
    rm.set_defaults(handler=_remove)


def _url() -> str:
    from catalog.connect import migrated_url

    return migrated_url(get_settings())


def _add(args: argparse.Namespace) -> int:
    from core.errors import InvalidInputError
    from services.caller import Caller
    from services.schedules import add

    job_args: dict[str, str] = {}
    for kv in args.arg:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            raise InvalidInputError(f"--arg {kv!r} must be KEY=VALUE")
        job_args[key] = value
    with psycopg.connect(_url()) as conn:
        row = add(
            conn,
            job=args.job,
            cron=args.cron,
            args=job_args,
            caller=Caller(operator(), "cli"),
            now=datetime.now(UTC),
        )
    print(f"schedule {row.schedule_id}: {row.job} at '{row.cron}', next run {row.next_run_at.isoformat()}")
    return 0


def _list(args: argparse.Namespace) -> int:
    from services.schedules import list_schedules

    with psycopg.connect(_url()) as conn:
        rows = [
            {
                "schedule_id": s.schedule_id,
                "job": s.job,
                "cron": s.cron,
                "args": dict(s.args),
                "enabled": s.enabled,
                "next_run_at": s.next_run_at,
                "last_run_at": s.last_run_at,
                "last_result": s.last_result,
            }
            for s in list_schedules(conn)
        ]
    columns = ("schedule_id", "job", "cron", "next_run_at", "last_run_at", "last_result")
    print_rows(rows, columns, as_json=args.json, title="schedules")
    return 0


def _remove(args: argparse.Namespace) -> int:
    from core.errors import NotFoundError
    from services.caller import Caller
    from services.schedules import remove

    try:
        with psycopg.connect(_url()) as conn:
            remove(conn, schedule_id=args.schedule_id, caller=Caller(operator(), "cli"))
    except NotFoundError as exc:
        print(f"ragline: {exc.message}", file=sys.stderr)
        return 1
    print(f"removed schedule {args.schedule_id}")
    return 0

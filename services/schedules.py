"""Cron schedules for rebuild and re-embed jobs: add, remove, list, run the due ones.

A schedule is due when its ``next_run_at`` has passed. Running it first advances
``next_run_at`` to the next window after *now* with a compare-and-set, so a window runs once
however many processes look at it, and a server that was down for N windows catches up with
one run, not N. The servers' maintenance loop calls :func:`run_due` under its advisory lock;
``ragline jobs run-due`` is the same call for an external cron. ``ragline schedule add|remove``
call :func:`add` and :func:`remove`, which audit ``schedule.add``/``schedule.remove``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from croniter import croniter

from catalog import audit, maintenance
from catalog import schedules as schedules_repo
from catalog.schedules import ScheduleRow
from core.errors import InvalidInputError
from services.caller import Caller

log = logging.getLogger(__name__)

# A job kind -> runs it with the schedule's stored arguments and returns a one-line result.
ScheduleRunner = Callable[[Mapping[str, Any]], str]
JOBS = ("rebuild", "reembed")


@dataclass(frozen=True, slots=True)
class ScheduledRun:
    schedule_id: int
    job: str
    result: str


def validate_cron(expression: str) -> str:
    if not croniter.is_valid(expression):
        raise InvalidInputError(f"not a cron expression: {expression!r} (five fields, e.g. '0 3 * * 0')")
    return expression


def next_after(expression: str, after: datetime) -> datetime:
    """The first window of ``expression`` strictly after ``after`` (UTC)."""
    return croniter(expression, after.astimezone(UTC)).get_next(datetime)


# The arguments each job kind takes, and how a stored (string) value becomes its type.
_ARG_TYPES: dict[str, dict[str, Callable[[str], Any]]] = {
    "rebuild": {"shards": int},
    "reembed": {
        "model": str,
        "chunking": str,
        "index_kind": str,
        "shards": int,
        "gate_dataset": str,
        "gate_tolerance": float,
        "query_file": str,
        "force": lambda v: {"true": True, "false": False}[v.lower()],
    },
}
_REQUIRED = {"rebuild": (), "reembed": ("model",)}


def validate_args(job: str, args: Mapping[str, str]) -> dict[str, Any]:
    """Typed job arguments from ``KEY=VALUE`` strings; unknown or missing keys are refused."""
    if job not in JOBS:
        raise InvalidInputError(f"job must be one of {JOBS}, got {job!r}")
    types = _ARG_TYPES[job]
    unknown = sorted(set(args) - set(types))
    if unknown:
        raise InvalidInputError(f"{job} takes {sorted(types)}; unknown: {unknown}")
    missing = [k for k in _REQUIRED[job] if k not in args]
    if missing:
        raise InvalidInputError(f"{job} needs {missing}")
    typed: dict[str, Any] = {}
    for key, value in args.items():
        try:
            typed[key] = types[key](str(value))
        except (KeyError, ValueError) as exc:
            raise InvalidInputError(f"{job} argument {key}={value!r} is not valid") from exc
    return typed


def add(
    conn: psycopg.Connection,
    *,
    job: str,
    cron: str,
    args: Mapping[str, str],
    caller: Caller,
    now: datetime,
) -> ScheduleRow:
    """Store a schedule and audit ``schedule.add``; its first run is the first window after ``now``."""
    with conn.transaction():
        row = schedules_repo.add_schedule(
            conn,
            job=job,
            cron=validate_cron(cron),
            args=validate_args(job, args),
            next_run_at=next_after(cron, now),
            created_by=caller.actor,
        )
        audit.record(
            conn,
            actor=caller.actor,
            action="schedule.add",
            target=str(row.schedule_id),
            details={"job": row.job, "cron": row.cron, "args": dict(row.args), "via": caller.via},
        )
    return row


def remove(conn: psycopg.Connection, *, schedule_id: int, caller: Caller) -> None:
    """Delete a schedule and audit ``schedule.remove``; NotFoundError when there is none."""
    with conn.transaction():
        schedules_repo.remove_schedule(conn, schedule_id=schedule_id)
        audit.record(
            conn,
            actor=caller.actor,
            action="schedule.remove",
            target=str(schedule_id),
            details={"via": caller.via},
        )


def list_schedules(conn: psycopg.Connection) -> list[ScheduleRow]:
    """Every schedule with its next and last runs (``ragline schedule list``)."""
    return schedules_repo.list_schedules(conn)


def run_due(
    conn: psycopg.Connection, *, now: datetime, runners: Mapping[str, ScheduleRunner]
) -> list[ScheduledRun]:
    """Run every schedule due at ``now`` once; ``conn`` must be in autocommit mode."""
    ran = []
    for schedule in schedules_repo.due_schedules(conn, now=now):
        following = next_after(schedule.cron, now)  # every missed window collapses into this run
        claimed = schedules_repo.claim_run(
            conn, schedule_id=schedule.schedule_id, expected_next=schedule.next_run_at, next_run_at=following
        )
        if not claimed:  # another process took this window
            continue
        runner = runners.get(schedule.job)
        try:
            if runner is None:
                raise InvalidInputError(f"this process cannot run {schedule.job} jobs")
            result = runner(schedule.args)
        except Exception as exc:  # recorded on the schedule; the next window tries again
            log.exception("scheduled %s (schedule %s) failed", schedule.job, schedule.schedule_id)
            result = f"failed: {type(exc).__name__}: {exc}"
        schedules_repo.record_result(conn, schedule_id=schedule.schedule_id, result=result)
        ran.append(ScheduledRun(schedule.schedule_id, schedule.job, result))
    return ran


def run_due_exclusive(
    conninfo: str, *, now: datetime, runners: Mapping[str, ScheduleRunner]
) -> list[ScheduledRun] | None:
    """:func:`run_due` under the maintenance lock (``ragline jobs run-due``), so a server's
    maintenance loop and an external cron never run one window twice; None when another
    process holds the lock (nothing run)."""
    with (
        psycopg.connect(conninfo, autocommit=True) as conn,
        maintenance.try_advisory_lock(conn, maintenance.SCHEDULER_LOCK) as held,
    ):
        return run_due(conn, now=now, runners=runners) if held else None

"""Stored cron schedules and the compare-and-set that claims one due run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from core.errors import NotFoundError


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    schedule_id: int
    job: str
    cron: str
    args: Mapping[str, Any]
    enabled: bool
    next_run_at: datetime
    last_run_at: datetime | None
    last_result: str | None
    created_by: str
    created_at: datetime


_COLUMNS = (
    "schedule_id, job, cron, args, enabled, next_run_at, last_run_at, last_result, created_by, created_at"
)
_ROW = class_row(ScheduleRow)


def add_schedule(
    conn: psycopg.Connection,
    *,
    job: str,
    cron: str,
    args: Mapping[str, Any],
    next_run_at: datetime,
    created_by: str,
) -> ScheduleRow:
    with conn.cursor(row_factory=_ROW) as cur:
        row = cur.execute(
            "INSERT INTO schedules (job, cron, args, next_run_at, created_by) VALUES (%s, %s, %s, %s, %s)"
            f" RETURNING {_COLUMNS}",
            (job, cron, Jsonb(dict(args)), next_run_at, created_by),
        ).fetchone()
    if row is None:  # INSERT ... RETURNING always yields a row
        raise RuntimeError("schedules insert returned nothing")
    return row


def list_schedules(conn: psycopg.Connection) -> list[ScheduleRow]:
    with conn.cursor(row_factory=_ROW) as cur:
        return cur.execute(f"SELECT {_COLUMNS} FROM schedules ORDER BY schedule_id").fetchall()


def remove_schedule(conn: psycopg.Connection, *, schedule_id: int) -> None:
    cur = conn.execute("DELETE FROM schedules WHERE schedule_id = %s", (schedule_id,))
    if cur.rowcount != 1:
        raise NotFoundError(f"no schedule {schedule_id}")


def due_schedules(conn: psycopg.Connection, *, now: datetime) -> list[ScheduleRow]:
    with conn.cursor(row_factory=_ROW) as cur:
        return cur.execute(
            f"SELECT {_COLUMNS} FROM schedules WHERE enabled AND next_run_at <= %s ORDER BY next_run_at",
            (now,),
        ).fetchall()


def claim_run(
    conn: psycopg.Connection, *, schedule_id: int, expected_next: datetime, next_run_at: datetime
) -> bool:
    """Advance ``next_run_at`` if it is still ``expected_next``; True means this caller runs it."""
    cur = conn.execute(
        "UPDATE schedules SET next_run_at = %s, last_run_at = now(), last_result = 'running'"
        " WHERE schedule_id = %s AND next_run_at = %s AND enabled",
        (next_run_at, schedule_id, expected_next),
    )
    return cur.rowcount == 1


def record_result(conn: psycopg.Connection, *, schedule_id: int, result: str) -> None:
    conn.execute("UPDATE schedules SET last_result = %s WHERE schedule_id = %s", (result[:2000], schedule_id))

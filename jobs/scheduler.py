"""Scheduled index maintenance: rebuild when thresholds pass, swap ``live``, collect garbage.

Runs as a background thread in each API process; a PostgreSQL advisory lock makes exactly
one replica do the work per tick, so several replicas can run it safely.
"""

from __future__ import annotations

import logging
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import psycopg

from catalog import audit, indexes, maintenance
from jobs.rebuild_job import RebuildConfig, rebuild, rebuild_advice
from jobs.staging import collect_orphan_uploads

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MaintenancePolicy:
    alias: str
    interval_seconds: float
    tombstone_ratio: float
    delta_chunks: int
    gc_grace_seconds: int
    upload_dir: Path
    upload_gc_grace_seconds: int


@dataclass(frozen=True, slots=True)
class TickResult:
    ran: bool  # False when another replica held the lock
    rebuilt: str | None
    reasons: tuple[str, ...]
    collected: tuple[str, ...]


def tick(conninfo: str, config: RebuildConfig, policy: MaintenancePolicy) -> TickResult:
    """One maintenance pass: rebuild + swap if advised, then delete expired versions."""
    with (
        psycopg.connect(conninfo, autocommit=True) as conn,
        maintenance.try_advisory_lock(conn, maintenance.SCHEDULER_LOCK) as held,
    ):
        if not held:
            return TickResult(False, None, (), ())
        return _maintain(conn, conninfo, config, policy)


def _maintain(
    conn: psycopg.Connection, conninfo: str, config: RebuildConfig, policy: MaintenancePolicy
) -> TickResult:
    advice = rebuild_advice(
        conn,
        alias=policy.alias,
        tombstone_ratio=policy.tombstone_ratio,
        delta_chunks=policy.delta_chunks,
        model=config.model_name,
    )
    built = None
    if advice.needed:
        log.info("scheduled rebuild: %s", "; ".join(advice.reasons))
        built = rebuild(conninfo, config)
        with conn.transaction():
            previous = indexes.swap_alias(conn, alias=policy.alias, version_id=built)
            audit.record(
                conn,
                actor="scheduler",
                action="index.swap",
                target=policy.alias,
                details={"from": previous, "to": built, "reasons": list(advice.reasons)},
            )
    collected = []
    for version in indexes.gc_candidates(conn, grace_seconds=policy.gc_grace_seconds):
        shutil.rmtree(version.path, ignore_errors=True)
        indexes.retire(conn, version_id=version.version_id)
        collected.append(version.version_id)
    collect_orphan_uploads(conn, upload_dir=policy.upload_dir, grace_seconds=policy.upload_gc_grace_seconds)
    return TickResult(True, built, advice.reasons, tuple(collected))


class MaintenanceScheduler:
    """Calls ``tick`` every ``policy.interval_seconds`` until closed."""

    def __init__(self, conninfo: str, config: RebuildConfig, policy: MaintenancePolicy) -> None:
        self.conninfo, self.config, self.policy = conninfo, config, policy
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="index-maintenance", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.policy.interval_seconds):
            try:
                tick(self.conninfo, self.config, self.policy)
            except Exception:  # the next tick retries; serving is unaffected
                log.exception("index maintenance tick failed")

"""Scheduled maintenance: rebuild when thresholds pass, swap ``live``, collect garbage (index
versions past their grace, audit entries past the retention).

Runs as a background thread in each API process; a PostgreSQL advisory lock makes exactly
one replica do the work per tick, so several replicas can run it safely. The tick rebuilds,
swaps and collects through the same :mod:`services.index` functions as ``ragline index`` and
the console (as the ``scheduler`` caller), so its audit entries have their shapes. It lives
in ``services`` rather than ``jobs`` because it calls those operations.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from catalog import audit, indexes, maintenance
from catalog import purge as purge_repo
from catalog import reembed as reembed_repo
from catalog.purge import PurgeCounts
from jobs.rebuild_job import RebuildConfig, rebuild_advice
from jobs.staging import collect_orphan_uploads
from services import index as index_ops
from services.caller import Caller
from services.schedules import ScheduledRun, ScheduleRunner, run_due

log = logging.getLogger(__name__)

SCHEDULER = Caller("scheduler", "scheduler")  # the maintenance tick's own work
SCHEDULE = Caller("schedule", "scheduler")  # a stored schedule's run


@dataclass(frozen=True, slots=True)
class MaintenancePolicy:
    alias: str
    interval_seconds: float
    tombstone_ratio: float
    delta_chunks: int
    gc_grace_seconds: int
    audit_retention_seconds: float
    upload_dir: Path
    upload_gc_grace_seconds: int
    purge_after_seconds: float = 86400.0


@dataclass(frozen=True, slots=True)
class TickResult:
    ran: bool  # False when another replica held the lock
    rebuilt: str | None
    reasons: tuple[str, ...]
    collected: tuple[str, ...]
    scheduled: tuple[ScheduledRun, ...] = ()
    audit_removed: int = 0  # audit entries past the retention, deleted this tick
    purged: PurgeCounts = PurgeCounts()  # hidden versions and stale payloads purged this tick


def tick(
    conninfo: str,
    config: RebuildConfig,
    policy: MaintenancePolicy,
    runners: Mapping[str, ScheduleRunner] | None = None,
) -> TickResult:
    """One maintenance pass: due schedules, rebuild + swap if advised, delete expired versions."""
    with (
        psycopg.connect(conninfo, autocommit=True) as conn,
        maintenance.try_advisory_lock(conn, maintenance.SCHEDULER_LOCK) as held,
    ):
        if not held:
            return TickResult(False, None, (), ())
        scheduled = tuple(run_due(conn, now=datetime.now(UTC), runners=runners or {}))
        return replace(_maintain(conn, conninfo, config, policy), scheduled=scheduled)


def purge_expired(conn: psycopg.Connection, *, older_than_seconds: float, caller: Caller) -> PurgeCounts:
    """The maintenance tick's purge: versions hidden longer than ``older_than_seconds`` and
    the payloads of cancelled or failed jobs finished that long ago; audited when it did
    anything. ``conn`` is autocommit."""
    with conn.transaction():
        counts = purge_repo.purge_hidden(conn, older_than_seconds=older_than_seconds)
        payloads = purge_repo.drop_stale_payloads(conn, older_than_seconds=older_than_seconds)
        counts = counts + PurgeCounts(job_payloads=payloads)
        if counts.any:
            audit.record(
                conn,
                actor=caller.actor,
                action="retention.purge",
                details={
                    "versions": counts.versions,
                    "chunks": counts.chunks,
                    "documents": counts.documents,
                    "job_payloads": counts.job_payloads,
                    "via": caller.via,
                },
            )
    if counts.any:
        log.info("retention purge: %s", counts)
    return counts


def scheduled_rebuild(conninfo: str, config: RebuildConfig, *, alias: str) -> ScheduleRunner:
    """The runner of ``rebuild`` schedules; the stored arguments may set ``shards``."""

    def run(args: Mapping[str, Any]) -> str:
        shards = int(args.get("shards") or config.n_shards)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            built = index_ops.rebuild(
                conn,
                conninfo,
                replace(config, n_shards=shards),
                caller=SCHEDULE,
                swap_alias=alias,
                reasons=["schedule"],
            ).version_id
        return f"built {built}; {alias} -> {built}"

    return run


def _maintain(
    conn: psycopg.Connection, conninfo: str, config: RebuildConfig, policy: MaintenancePolicy
) -> TickResult:
    purged = purge_expired(conn, older_than_seconds=policy.purge_after_seconds, caller=SCHEDULER)
    built, reasons = _rebuild_if_advised(conn, conninfo, config, policy)
    collected = index_ops.collect_garbage(conn, grace_seconds=policy.gc_grace_seconds, caller=SCHEDULER)
    collect_orphan_uploads(conn, upload_dir=policy.upload_dir, grace_seconds=policy.upload_gc_grace_seconds)
    removed = audit.collect_garbage(conn, retention_seconds=policy.audit_retention_seconds)
    if removed:
        log.info("audit retention: removed %d entries", removed)
    return TickResult(True, built, reasons, collected.deleted, audit_removed=removed, purged=purged)


def _rebuild_if_advised(
    conn: psycopg.Connection, conninfo: str, config: RebuildConfig, policy: MaintenancePolicy
) -> tuple[str | None, tuple[str, ...]]:
    """Rebuild and swap ``policy.alias`` when its thresholds pass or a purge left its files
    stale, unless a model migration runs; returns the new version (or None) and the reasons."""
    live = indexes.resolve_alias(conn, alias=policy.alias)
    if live is not None and live.embedding_model != config.model_name:  # migrated: follow the alias
        config = replace(config, model_name=live.embedding_model)
    advice = rebuild_advice(
        conn,
        alias=policy.alias,
        tombstone_ratio=policy.tombstone_ratio,
        delta_chunks=policy.delta_chunks,
        model=config.model_name,
    )
    reasons = advice.reasons
    stale = live is not None and purge_repo.purged_since(conn, version_id=live.version_id)
    if stale:  # the live version's files may hold purged text (this tick's or an erasure's)
        reasons = (*reasons, "purge: live version predates it")
    if not (advice.needed or stale):
        return None, reasons
    migration = reembed_repo.active_migration(conn)
    if migration is not None:  # rebuilds wait for the model migration
        log.info("scheduled rebuild deferred: model migration %s is running", migration.job_id)
        return None, (*reasons, f"deferred: migration {migration.job_id} running")
    log.info("scheduled rebuild: %s", "; ".join(reasons))
    if stale:
        built = index_ops.rebuild_and_forget(
            conn, conninfo, config, alias=policy.alias, caller=SCHEDULER, reasons=reasons
        )
        return built, reasons
    rebuilt = index_ops.rebuild(
        conn, conninfo, config, caller=SCHEDULER, swap_alias=policy.alias, reasons=reasons
    )
    return rebuilt.version_id, reasons


class MaintenanceScheduler:
    """Calls ``tick`` every ``policy.interval_seconds`` until closed."""

    def __init__(
        self,
        conninfo: str,
        config: RebuildConfig,
        policy: MaintenancePolicy,
        runners: Mapping[str, ScheduleRunner] | None = None,
    ) -> None:
        self.conninfo, self.config, self.policy = conninfo, config, policy
        self.runners = dict(runners or {})
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
                tick(self.conninfo, self.config, self.policy, self.runners)
            except Exception:  # the next tick retries; serving is unaffected
                log.exception("index maintenance tick failed")

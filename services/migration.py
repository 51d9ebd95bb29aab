"""Starting a model migration (re-embed): ``ragline reembed``, ``POST /v1/admin/reembed`` and a
stored ``reembed`` schedule call :func:`start_reembed`, which records the job, its
``reembed.start`` audit entry (``via`` from the config) and the active migration.

Running it is the worker's (``jobs.reembed_job.run_reembed``): the worker is itself the actor
of what follows, so its own audit entry (``reembed.swap``, when the gate passes or is
forced) stays in ``jobs/``.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any, Protocol

import psycopg

from catalog import audit
from catalog import indexes as indexes_repo
from catalog import jobs as jobs_repo
from catalog import principals as principals_repo
from catalog import reembed as reembed_repo
from catalog.jobs import JobRow
from core.errors import ConflictError, InvalidInputError, UnavailableError
from jobs.reembed_job import ReembedArgs, ReembedConfig, capacity_check

__all__ = [
    "JobRow",
    "MigrationWorker",
    "ReembedArgs",
    "ReembedConfig",
    "migration_job",
    "missing_vectors",
    "start_on",
    "start_reembed",
]


class MigrationWorker(Protocol):
    """What runs a started migration in this process (``jobs.reembed_job.ReembedWorker``)."""

    def submit(self, job_id: uuid.UUID, config: ReembedConfig) -> None: ...


def _live_model(conn: psycopg.Connection, config: ReembedConfig) -> str:
    """The model the alias serves now; refuses a migration that would change nothing."""
    row = indexes_repo.resolve_alias(conn, alias=config.alias)
    live_model = row.embedding_model if row else config.live_model
    if live_model == config.target.model_name and config.chunking is None and not config.args.force:
        raise ConflictError(f"{config.alias} already serves {live_model}; nothing to migrate")
    return live_model


def start_reembed(conninfo: str, config: ReembedConfig, *, target_dim: int | None = None) -> uuid.UUID:
    """Record a migration job (queued), audit ``reembed.start`` and make its model the
    dual-write target; run it with ``run_reembed`` (or hand it to a worker: :func:`start_on`).

    ``config.actor`` and ``config.via`` are the caller. ``target_dim`` skips loading the model
    (tests that know it).

    Raises:
        ConflictError: another migration is active, or the alias already serves the model.
        CapacityError: the budgets cannot hold two versions.
    """
    with psycopg.connect(conninfo) as conn:
        capacity, live_model = _admit(conn, config, target_dim)
        return _record(conn, config, capacity, live_model)


def start_on(worker: MigrationWorker | None, conninfo: str, config: ReembedConfig) -> JobRow:
    """Start a migration and hand it to this server's worker (``POST /v1/admin/reembed``);
    returns the queued job.

    Raises:
        UnavailableError: this server runs no migration worker (checked after the request's
            own errors, and before anything is recorded).
    """
    with psycopg.connect(conninfo) as conn:
        capacity, live_model = _admit(conn, config, None)
        if worker is None:
            raise UnavailableError("the model-migration worker is not running on this server")
        job_id = _record(conn, config, capacity, live_model)
    worker.submit(job_id, config)
    with psycopg.connect(conninfo) as conn:
        job = jobs_repo.get_job(conn, job_id=job_id)
    if job is None:
        raise InvalidInputError(f"job {job_id} vanished")
    return job


def _admit(
    conn: psycopg.Connection, config: ReembedConfig, target_dim: int | None
) -> tuple[dict[str, Any], str]:
    """The checks before a migration starts: none active, the model loads, two versions fit,
    and it changes something; returns the capacity report and the model served now."""
    active = reembed_repo.active_migration(conn)
    if active is not None:
        raise ConflictError(f"a model migration is already running (job {active.job_id})")
    # Loading the model also proves it loads before anything starts.
    dim = target_dim if target_dim is not None else dataclasses.replace(config.target, threads=1).load().dim
    capacity = capacity_check(conn, config, target_dim=dim)
    return capacity, _live_model(conn, config)


def _record(
    conn: psycopg.Connection, config: ReembedConfig, capacity: dict[str, Any], live_model: str
) -> uuid.UUID:
    """The job, its ``reembed.start`` entry and the active migration, committed together."""
    principals_repo.ensure_tenant(conn, tenant_id=config.tenant_id)
    with conn.transaction():
        job_id = jobs_repo.create_job(
            conn, tenant_id=config.tenant_id, kind="reembed", items=[], params=config.args.to_params()
        )
        jobs_repo.set_report(conn, job_id=job_id, report={"capacity": capacity})
        audit.record(
            conn,
            actor=config.actor,
            action="reembed.start",
            tenant_id=config.tenant_id,
            target=config.target.model_name,
            details={"job_id": str(job_id), "from": live_model, **config.args.to_params(), "via": config.via},
        )
    reembed_repo.start_migration(
        conn,
        job_id=job_id,
        model=config.target.model_name,
        live_model=live_model,
        chunking=config.chunking.label if config.chunking else None,
    )
    conn.commit()
    return job_id


def migration_job(conn: psycopg.Connection, job_id: uuid.UUID) -> JobRow | None:
    """A migration job by id; None when there is none (or it is another kind of job)."""
    job = jobs_repo.get_job(conn, job_id=job_id)
    return job if job is not None and job.kind == "reembed" else None


def missing_vectors(conn: psycopg.Connection, *, model: str) -> int:
    """Live chunks still without a vector for ``model`` (what a resumed migration embeds)."""
    return reembed_repo.missing_count(conn, model=model)

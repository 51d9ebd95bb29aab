"""Runs ingestion jobs in the background of a process (API server or CLI), one at a time.

Small jobs take the in-process fast path (same stage functions) so a pushed document is
searchable in seconds; larger ones go through Ray Data. The runner owns its own embedder
instance so ingestion never holds the lock the query path embeds under. Jobs left running
by a dead process are resumed at start-up (their lease expires after 60 s of silence).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_delay, wait_exponential

from catalog import jobs as jobs_repo
from index.embedder import Embedder, EmbeddingSpec
from ingest.pipeline import ChunkingConfig
from jobs.dual_write import DualWriter
from jobs.ingest_job import Cancelled, JobContext, run_inline, run_on_ray
from jobs.ray_runtime import ensure_ray

log = logging.getLogger(__name__)

# How long a job interrupted by a PostgreSQL outage is retried (backoff 0.5 s doubling to 5 s)
# before the runner moves on; after that, its lease runs out and the idle tick resumes it.
OUTAGE_RETRY_S = 300.0


def database_down(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it, e.g. inside a Ray task error) is the database
    going away: a refused connection, a backend killed by a restart, a pool timeout."""
    seen: BaseException | None = exc
    for _ in range(8):  # a cause chain, not a cycle
        if seen is None:
            return False
        if isinstance(seen, psycopg.OperationalError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _log_retry(state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome is not None else None
    log.warning(
        "job paused: the database is unavailable (%s); retry %d in %.1fs",
        type(error).__name__,
        state.attempt_number,
        state.next_action.sleep if state.next_action is not None else 0.0,
    )


@dataclass(frozen=True, slots=True)
class RunnerConfig:
    conninfo: str
    model_name: str
    chunking: ChunkingConfig
    data_dir: Path
    upload_dir: Path  # staged uploads: removed as their items end
    inline_max_documents: int
    use_ray: bool
    ray_address: str | None
    prepare_actors: int
    embed_actors: int
    embed_batch: int
    embedding: EmbeddingSpec  # how Ray actors build their embedder
    lease_seconds: float  # a running job silent for this long is taken over
    alias: str  # the serving alias: its versions' models get vectors too (dual write)
    batch_documents: int = 8  # documents per commit batch; not a setting


class IngestRunner:
    def __init__(self, config: RunnerConfig, embedder_factory: Callable[[], Embedder]) -> None:
        self.config = config
        self._embedder_factory = embedder_factory
        self._embedder: Embedder | None = None
        self.dual = DualWriter(
            alias=config.alias,
            base_model=config.model_name,
            load=lambda model: config.embedding.for_model(model).load(),
        )
        self._queue: queue.Queue[uuid.UUID | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        # Called with (connection, job id, final state) after a job finishes (the metrics hook).
        self.on_finished: Callable[[psycopg.Connection, uuid.UUID, str], None] | None = None

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = self._embedder_factory()
        return self._embedder

    def start(self, *, resume: bool = True) -> None:
        self._thread = threading.Thread(target=self._loop, name="ingest-runner", daemon=True)
        self._thread.start()
        if resume:
            with psycopg.connect(self.config.conninfo, autocommit=True) as conn:
                for job_id in jobs_repo.unfinished_jobs(conn):
                    self.submit(job_id)

    def _reclaim_orphans(self) -> None:
        try:
            with psycopg.connect(self.config.conninfo, autocommit=True) as conn:
                orphans = jobs_repo.orphaned_jobs(conn, lease_seconds=self.config.lease_seconds)
        except Exception:  # the catalog is unreachable: the next idle tick tries again
            log.warning("cannot look for orphaned jobs", exc_info=True)
            return
        for job_id in orphans:
            self.submit(job_id)

    def submit(self, job_id: uuid.UUID) -> None:
        self._idle.clear()
        self._queue.put(job_id)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every submitted job is done (tests, CLI)."""
        return self._idle.wait(timeout)

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        while True:
            try:
                job_id = self._queue.get(timeout=self.config.lease_seconds / 2)
            except queue.Empty:
                # Idle: take over jobs whose process died (their lease ran out) and queued jobs
                # no runner picked up (the pushing replica died before its queue drained).
                self._reclaim_orphans()
                continue
            if job_id is None:
                return
            try:
                self._run_through_outages(job_id)
            except Exception:  # the runner must survive any one job
                log.exception("job %s crashed", job_id)
            finally:
                if self._queue.empty():
                    self._idle.set()

    def _run_through_outages(self, job_id: uuid.UUID) -> None:
        """Run the job; through a database outage, pause and run it again when it returns.

        A rerun is safe: it claims the job again (the same owner may), and every item commits
        in its own transaction that re-checks the item is still pending, so an item committed
        before the outage is neither lost nor written twice, and one cut off mid-way rolled back.
        """
        for attempt in Retrying(
            retry=retry_if_exception(database_down),
            wait=wait_exponential(multiplier=0.5, max=5.0),
            stop=stop_after_delay(OUTAGE_RETRY_S),
            before_sleep=_log_retry,
            reraise=True,
        ):
            with attempt:
                self.run_job(job_id)

    def run_job(
        self, job_id: uuid.UUID, on_progress: Callable[[int, int], None] | None = None, *, force: bool = False
    ) -> str | None:
        """Run one job to its end; returns the final state (None if another worker holds it)."""
        with psycopg.connect(self.config.conninfo, autocommit=True) as conn:
            claimed = jobs_repo.claim_job(
                conn, job_id=job_id, owner=self.owner, lease_seconds=self.config.lease_seconds, force=force
            )
            if not claimed:
                return None
            job = jobs_repo.get_job(conn, job_id=job_id)
            if job is None:
                return None
            ctx = JobContext(
                job_id=job_id,
                tenant_id=job.tenant_id,
                conninfo=self.config.conninfo,
                model_name=self.config.model_name,
                chunking=self.config.chunking,
                batch_documents=self.config.batch_documents,
                embedding=self.config.embedding,
                upload_dir=self.config.upload_dir,
            )
            error = None
            try:
                self._execute(conn, ctx, on_progress)
            except Cancelled:
                log.info("job %s cancelled", job_id)
            except Exception as exc:  # recorded on the job; pending items stay resumable
                if database_down(exc):
                    raise  # not the job's fault: it pauses and runs again (see above)
                log.exception("job %s failed", job_id)
                error = f"{type(exc).__name__}: {exc}"[:500]
            state = jobs_repo.finish_job(conn, job_id=job_id, error=error)
            log.info("job %s finished: %s", job_id, state)
            if self.on_finished is not None:
                try:
                    self.on_finished(conn, job_id, state)
                except Exception:  # an observer must never fail the job
                    log.exception("job %s: on_finished hook failed", job_id)
            return state

    def _execute(
        self, conn: psycopg.Connection, ctx: JobContext, on_progress: Callable[[int, int], None] | None
    ) -> None:
        pending = len(jobs_repo.items(conn, job_id=ctx.job_id, state="pending"))
        if not self.config.use_ray or pending <= self.config.inline_max_documents:
            run_inline(conn, ctx, self.embedder, on_progress, self.dual)
            return
        ensure_ray(address=self.config.ray_address, data_dir=self.config.data_dir)
        run_on_ray(
            conn,
            ctx,
            prepare_actors=self.config.prepare_actors,
            embed_actors=self.config.embed_actors,
            embed_batch=self.config.embed_batch,
            on_progress=on_progress,
            dual=self.dual,
        )

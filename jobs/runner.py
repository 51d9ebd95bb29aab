"""Runs ingestion jobs in the background of a process (API server or CLI), fairly across tenants.

Small jobs take the in-process fast path (same stage functions) so a pushed document is
searchable in seconds; larger ones go through Ray Data. In an API server the runner embeds
with the search service's loaded model (one copy per process, issue 42): on ONNX the two only
share the tokenizer's lock, on PyTorch a query waits for an ingest slice's forward pass. Up to
``concurrent_jobs`` jobs run at once, at most one per tenant. Jobs left running by a dead
process are taken over (their lease expires after ``job_lease_seconds`` of silence); one a
cancel was asked for is settled ``cancelled`` instead of being run again.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_delay, wait_exponential

from catalog import erasures as erasures_repo
from catalog import indexes as indexes_repo
from catalog import jobs as jobs_repo
from catalog.jobs import TERMINAL
from core import tracing
from index.embedder import Embedder, EmbeddingSpec
from ingest.isolation import IsolationConfig, Parser
from ingest.parse_pool import make_parser
from ingest.pipeline import ChunkingConfig
from jobs.dual_write import DualWriter
from jobs.ingest_job import Cancelled, JobContext, LeaseLost, run_inline, run_on_ray
from jobs.lease import LeaseKeeper
from jobs.ray_runtime import ensure_ray
from jobs.staging import remove_staged

log = logging.getLogger(__name__)

# How long a job interrupted by a PostgreSQL outage is retried (backoff 0.5 s doubling to 5 s)
# before the runner moves on; after that, its lease runs out and the idle tick resumes it.
OUTAGE_RETRY_S = 300.0
# How often a job run by another worker is looked at while this process follows it.
FOLLOW_POLL_S = 1.0


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


def corpus_chunking(conn: psycopg.Connection, *, alias: str, configured: ChunkingConfig) -> ChunkingConfig:
    """The chunking a new ingest cuts with: the one ``alias``'s index version was built with
    (chunking is a property of the corpus: a re-chunking migration changes it, a rollback
    changes it back), else the configured one (no version yet, or one built before versions
    recorded it). Only the chunk size and overlap come from the version."""
    live = indexes_repo.resolve_alias(conn, alias=alias)
    label = live.chunking if live is not None else None
    if label is None or label == configured.label:
        return configured
    return configured.with_label(label)


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
    isolation: IsolationConfig  # parse workers: in-process or rlimit'd processes
    concurrent_jobs: int  # jobs run at once by the workers, at most one per tenant
    batch_documents: int = 8  # documents per commit batch; not a setting


class IngestRunner:
    """Background workers that claim jobs fairly and run them; ``run_job`` runs one here.

    ``concurrent_jobs`` workers each claim the oldest job of a tenant with nothing running
    (``catalog.jobs.claim_next``, serialised across replicas), so one tenant's huge job holds
    one worker and only delays that tenant. The workers share the runner's embedder (its
    encode calls are locked and come in ``embed_batch`` slices, so jobs interleave per slice);
    the Ray pipeline is used by one job at a time, a second large job runs in-process.
    """

    def __init__(self, config: RunnerConfig, embedder_factory: Callable[[], Embedder]) -> None:
        self.config = config
        self._embedder_factory = embedder_factory
        self._embedder: Embedder | None = None
        self._parser: Parser | None = None
        self._lazy_lock = threading.Lock()  # the embedder and the parser are built on first use
        self.dual = DualWriter(
            alias=config.alias,
            base_model=config.model_name,
            load=lambda model: config.embedding.for_model(model).load(),
        )
        self._threads: list[threading.Thread] = []
        self._wake = threading.Condition()
        self._generation = 0  # bumped by submit: workers look for work when it moves
        self._busy = 0  # workers claiming or running a job
        self._closing = False
        self._idle = threading.Event()
        self._idle.set()
        self._ray_slot = threading.Lock()
        self._running: set[uuid.UUID] = set()  # jobs our workers run: never "orphans" to us
        self._claim_lock = threading.Lock()  # guards _running; apart from _wake, so submit never waits on SQL
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        # Called with (connection, job id, final state) after a job finishes (the metrics hook).
        self.on_finished: Callable[[psycopg.Connection, uuid.UUID, str], None] | None = None

    @property
    def embedder(self) -> Embedder:
        with self._lazy_lock:  # workers may ask at once; build one instance
            if self._embedder is None:
                self._embedder = self._embedder_factory()
            return self._embedder

    @property
    def parser(self) -> Parser:
        """The inline path's parser, started on first use (its workers live until ``close``)."""
        with self._lazy_lock:  # workers may ask at once; start one pool
            if self._parser is None:
                self._parser = make_parser(self.config.isolation)
            return self._parser

    def start(self, *, resume: bool = True) -> None:
        """Start the workers; ``resume`` makes them look for queued and orphaned jobs at once
        (otherwise at the first ``submit`` or idle tick)."""
        with self._wake:
            if resume:
                self._generation += 1
                self._idle.clear()
        for n in range(max(1, self.config.concurrent_jobs)):
            thread = threading.Thread(target=self._worker, name=f"ingest-runner-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def submit(self, job_id: uuid.UUID) -> None:
        """A job was queued: wake the workers (they claim from the catalog, fairly, not this id)."""
        with self._wake:
            self._generation += 1
            self._idle.clear()
            self._wake.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no worker runs a job and none is left to claim (tests, CLI)."""
        return self._idle.wait(timeout)

    def close(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify_all()
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads = []
        if self._parser is not None:
            self._parser.close()
            self._parser = None

    def _worker(self) -> None:
        tried = 0  # the generation this worker last looked for work at
        while True:
            with self._wake:
                while not self._closing and tried == self._generation:
                    # Idle tick: take over jobs whose process died (their lease ran out) and
                    # queued jobs no runner picked up (the pushing replica died first).
                    if not self._wake.wait(timeout=self.config.lease_seconds / 2):
                        break
                if self._closing:
                    return
                tried = self._generation
                self._busy += 1
            ran = False
            try:
                ran = self._run_next()
            except Exception:  # the runner must survive any one job, and an unreachable catalog
                log.exception("ingest worker: claiming or running a job failed")
            finally:
                with self._wake:
                    self._busy -= 1
                    if ran:
                        tried = -1  # look again at once: that tenant's next job may be waiting
                    elif self._busy == 0 and tried == self._generation:
                        self._idle.set()

    def _run_next(self) -> bool:
        with psycopg.connect(self.config.conninfo, autocommit=True) as conn:
            # One claim at a time in this process, so the running set is exact when excluded.
            with self._claim_lock:
                job_id = jobs_repo.claim_next(
                    conn,
                    owner=self.owner,
                    lease_seconds=self.config.lease_seconds,
                    exclude=list(self._running),
                )
                if job_id is None:
                    return False
                self._running.add(job_id)
        try:
            self._run_through_outages(job_id)  # claims it again (same owner) and runs it
        finally:
            with self._claim_lock:
                self._running.discard(job_id)
        return True

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
        """Run one job to its end; returns the final state (None if another worker holds it).

        From the claim to the end, a thread renews the lease (``jobs.lease``): a start-up
        slower than the lease (Ray, a model load on a busy machine) does not lose the job.
        """
        with psycopg.connect(self.config.conninfo, autocommit=True) as conn:
            tracing.trace_connection(conn)  # statement spans inside a traced job
            claimed = jobs_repo.claim_job(
                conn, job_id=job_id, owner=self.owner, lease_seconds=self.config.lease_seconds, force=force
            )
            if not claimed:
                return None
            lease = LeaseKeeper(
                self.config.conninfo, job_id=job_id, owner=self.owner, lease_seconds=self.config.lease_seconds
            )
            with lease:
                return self._run_claimed(conn, job_id, on_progress)

    def run_to_end(
        self,
        job_id: uuid.UUID,
        on_progress: Callable[[int, int], None] | None = None,
        *,
        poll_seconds: float = FOLLOW_POLL_S,
    ) -> str:
        """Run the job here, or follow it to its end where another worker runs it.

        A job another live worker holds (a server's runner claimed it first, or took it over)
        is followed in the catalog, its progress reported to ``on_progress``; should that
        worker die, its lease runs out and the job is claimed here again. Returns the final
        state, as if this process had run it all.
        """
        progress = _Followed(self.config.conninfo, job_id, on_progress)
        while True:
            state = self.run_job(job_id, progress)
            if state is not None:
                return state
            job = progress.poll()
            if job.state in TERMINAL:
                return job.state
            time.sleep(poll_seconds)

    def _run_claimed(
        self, conn: psycopg.Connection, job_id: uuid.UUID, on_progress: Callable[[int, int], None] | None
    ) -> str | None:
        job = jobs_repo.get_job(conn, job_id=job_id)
        if job is None:
            return None
        error = None
        if job.cancel_requested:
            # Cancelled while its owner was gone (or before it started): settle it, never run it.
            log.info("job %s was cancelled before it ran here", job_id)
        else:
            try:
                attributes = {"ragline.job.id": str(job_id), "ragline.job.kind": job.kind}
                with tracing.continued("ingest.job", job.params.get("trace") or {}, **attributes):
                    self._execute(conn, self._context(conn, job), on_progress)
            except Cancelled:
                log.info("job %s cancelled", job_id)
            except LeaseLost:
                log.warning("job %s: another worker took it over; it goes on there", job_id)
                return None
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

    def _context(self, conn: psycopg.Connection, job: jobs_repo.JobRow) -> JobContext:
        chunking = corpus_chunking(conn, alias=self.config.alias, configured=self.config.chunking)
        if chunking != self.config.chunking:
            log.warning(
                "job %s: chunking %s, the live index version's; the settings' %s apply only to a"
                " corpus without one (change a corpus's chunking with ragline reembed --chunking)",
                job.job_id,
                chunking.label,
                self.config.chunking.label,
            )
        return JobContext(
            job_id=job.job_id,
            tenant_id=job.tenant_id,
            conninfo=self.config.conninfo,
            model_name=self.config.model_name,
            chunking=chunking,
            batch_documents=self.config.batch_documents,
            embedding=self.config.embedding,
            upload_dir=self.config.upload_dir,
            isolation=self.config.isolation,
            owner=self.owner,
            embed_batch=self.config.embed_batch,
        )

    def _execute(
        self, conn: psycopg.Connection, ctx: JobContext, on_progress: Callable[[int, int], None] | None
    ) -> None:
        # Items whose id was erased after they were queued never run (a resume, a retry).
        remove_staged(erasures_repo.settle_queued(conn, job_id=ctx.job_id), ctx.upload_dir)
        pending = len(jobs_repo.items(conn, job_id=ctx.job_id, state="pending"))
        small = not self.config.use_ray or pending <= self.config.inline_max_documents
        # Two Ray pipelines in one driver would compete for the same actor slots (and wait for
        # placement); a second large job runs in-process instead of waiting for the first.
        if small or not self._ray_slot.acquire(blocking=False):
            run_inline(conn, ctx, self.embedder, self.parser, on_progress, self.dual)
            return
        try:
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
        finally:
            self._ray_slot.release()


class _Followed:
    """Counts what a job's ``on_progress`` was told, and tells it the rest when another
    worker does the work (the job's counters in the catalog)."""

    def __init__(
        self, conninfo: str, job_id: uuid.UUID, on_progress: Callable[[int, int], None] | None
    ) -> None:
        self.conninfo, self.job_id, self.on_progress = conninfo, job_id, on_progress
        self.owner: str | None = None  # the worker being followed, once one is
        start = self._read()[0]
        self.documents, self.chunks = start.documents_done, start.chunks

    def __call__(self, documents: int, chunks: int) -> None:
        self.documents += documents
        self.chunks += chunks
        if self.on_progress is not None:
            self.on_progress(documents, chunks)

    def _read(self) -> tuple[jobs_repo.JobRow, str | None]:
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            job = jobs_repo.get_job(conn, job_id=self.job_id)
            owner = jobs_repo.lease_owner(conn, job_id=self.job_id)
        if job is None:
            raise LookupError(f"job {self.job_id} not found")
        return job, owner

    def poll(self) -> jobs_repo.JobRow:
        """The job now; its progress since the last look is passed on."""
        job, owner = self._read()
        if job.state not in TERMINAL and owner != self.owner:
            self.owner = owner
            log.warning("job %s runs on another worker (%s); following it to its end", self.job_id, owner)
        documents, chunks = max(0, job.documents_done - self.documents), max(0, job.chunks - self.chunks)
        if documents or chunks:
            self(documents, chunks)
        return job

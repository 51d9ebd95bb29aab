"""The backfill of a model migration: target vectors for every live chunk still lacking one.

Embeds in batches on Ray actors (one GPU each when the cluster has GPUs, else CPU actors) or
inline on a thread of the job's process, always at lower priority (``Isolation``: SCHED_IDLE
or ``nice`` for every thread of an actor, few intra-op threads) so serving keeps the CPU, and
commits every batch: a killed job resumes with the chunks still missing and never re-embeds a
committed one. Re-chunking (``jobs.rechunk``) runs here too.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import numpy as np
import psycopg

from catalog import reembed as reembed_repo
from index.embedder import Embedder, EmbeddingSpec
from index.tokens import TokenCounter
from ingest.pipeline import ChunkingConfig
from jobs.ray_runtime import ensure_ray
from jobs.rechunk import RechunkCounts, rechunk_pass
from retrieve.delta import lexical_text

log = logging.getLogger(__name__)
T = TypeVar("T")


class BackfillSettings(Protocol):
    """What the backfill reads of a migration's config (``jobs.reembed_job.ReembedConfig``)."""

    @property
    def target(self) -> EmbeddingSpec: ...
    @property
    def chunking(self) -> ChunkingConfig | None: ...
    @property
    def alias(self) -> str: ...
    @property
    def batch_chunks(self) -> int: ...
    @property
    def actors(self) -> int: ...
    @property
    def priority(self) -> Priority: ...
    @property
    def nice(self) -> int: ...
    @property
    def threads(self) -> int: ...
    @property
    def cpus(self) -> tuple[int, ...] | None: ...
    @property
    def use_ray(self) -> bool: ...
    @property
    def ray_address(self) -> str | None: ...
    @property
    def data_dir(self) -> Path: ...


Priority = Literal["idle", "nice"]


@dataclass(frozen=True, slots=True)
class Isolation:
    """How the backfill yields the CPU to serving (``reembed.priority``, ``nice``, ``threads``, ``cpus``)."""

    priority: Priority
    nice: int
    threads: int
    cpus: tuple[int, ...] | None = None


def _demote(tid: int, iso: Isolation) -> None:
    """One thread: SCHED_IDLE (runs only on a core nothing else wants) or ``nice``; ``cpus``."""
    if iso.priority == "idle":
        try:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        except (AttributeError, OSError):  # not Linux: fall back to the niceness
            iso = dataclasses.replace(iso, priority="nice")
    if iso.priority == "nice":
        os.setpriority(os.PRIO_PROCESS, tid, iso.nice)  # Linux niceness is per thread
    if iso.cpus:
        os.sched_setaffinity(tid, iso.cpus)


def _threads_of_this_process() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:  # no procfs: this thread only
        return [threading.get_native_id()]


class Demoter:
    """Demotes threads once each: the calling thread, or every thread of the process (a Ray
    actor is its own process, so its gRPC and worker threads, and the torch and OpenMP pools
    it starts later, are demoted too; ``again`` catches threads started since)."""

    def __init__(self, iso: Isolation, *, whole_process: bool) -> None:
        self.iso, self.whole_process = iso, whole_process
        self._done: set[int] = set()
        self._warned = False
        try:
            import torch

            torch.set_num_threads(iso.threads)
        except ImportError:
            pass
        self.again()

    def again(self) -> None:
        tids = _threads_of_this_process() if self.whole_process else [threading.get_native_id()]
        for tid in tids:
            if tid in self._done:
                continue
            try:
                _demote(tid, self.iso)
            except (AttributeError, OSError):  # not allowed, or the thread ended: run as it is
                if not self._warned:
                    log.warning("could not lower the migration's priority (%s)", self.iso)
                    self._warned = True
            self._done.add(tid)


def lower_priority(iso: Isolation) -> Demoter:
    """Run this thread (and the threads it starts) at the migration's lower priority."""
    return Demoter(iso, whole_process=False)


class _Lane:
    """One demoted thread of this process for the inline backfill, so the caller's thread (an
    API worker, the CLI, a test) keeps its own priority after the migration."""

    def __init__(self, iso: Isolation) -> None:
        self._pool = ThreadPoolExecutor(
            1, thread_name_prefix="reembed-embed", initializer=lower_priority, initargs=(iso,)
        )

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        return self._pool.submit(fn, *args).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class _LaneEmbedder:
    """An ``Embedder`` whose encodes run on the demoted lane (tokenizer counts stay here)."""

    def __init__(self, inner: Embedder, lane: _Lane) -> None:
        self.inner, self.lane = inner, lane
        self.model_name, self.dim, self.max_tokens = inner.model_name, inner.dim, inner.max_tokens

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.lane.call(self.inner.embed, texts)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    @property
    def token_counter(self) -> TokenCounter:
        return self.inner.token_counter


class _EmbedActor:
    """A Ray actor embedding migration batches with every thread demoted (one GPU each when present)."""

    def __init__(self, spec: EmbeddingSpec, iso: Isolation) -> None:
        self.demoter = Demoter(iso, whole_process=True)
        self.embedder = spec.load()
        self.demoter.again()

    def ready(self) -> bool:
        return True

    def embed(self, rows: list[int], texts: list[str]) -> tuple[list[int], np.ndarray]:
        self.demoter.again()  # a pool thread started since the last batch (cheap: one listdir)
        return rows, self.embedder.embed(texts)


Batch = tuple[list[int], list[str]]
Embedded = tuple[list[int], np.ndarray]


def _batches(conn: psycopg.Connection, model: str, size: int) -> Iterator[Batch]:
    """Every visible leaf chunk without a ``model`` vector, in row order, ``size`` at a time."""
    after = 0
    while True:
        found = reembed_repo.missing_chunks(conn, model=model, after_row=after, limit=size)
        conn.commit()
        if not found:
            return
        after = found[-1].chunk_row
        yield [c.chunk_row for c in found], [lexical_text(c.text, c.section_path) for c in found]


class Backfill:
    """Embeds the missing vectors inline (this thread) or on Ray actors; counts encodes."""

    def __init__(self, config: BackfillSettings) -> None:
        self.config = config
        self.encoded = 0  # texts this process sent to a model (the crash test counts them)
        self.startup_seconds = 0.0  # loading the model (and starting the actors)
        # Wall-clock (epoch) start and end of the last run's embedding, start-up excluded: the
        # window a benchmark compares serving latency in.
        self.embedding_window: tuple[float, float] | None = None
        self._began = 0.0
        self._embedder: Embedder | None = None
        self._lane: _Lane | None = None
        self._pool: Any = None
        self._actors: list[Any] = []

        self.rechunked = RechunkCounts()
        self._skipped: set[int] = set()
        self._others: dict[str, Embedder] = {}

    def _isolation(self) -> Isolation:
        c = self.config
        return Isolation(priority=c.priority, nice=c.nice, threads=c.threads, cpus=c.cpus)

    def _spec(self) -> EmbeddingSpec:
        return dataclasses.replace(self.config.target, threads=self.config.threads)

    def target_embedder(self) -> Embedder:
        """The target model in this process (inline path, re-chunking), encoding on a demoted thread."""
        if self._embedder is None:
            started = time.monotonic()
            self._lane = self._lane or _Lane(self._isolation())
            self._embedder = _LaneEmbedder(self._lane.call(self._spec().load), self._lane)
            self.startup_seconds += time.monotonic() - started
        return self._embedder

    def _embedder_for(self, model: str) -> Embedder:
        if model == self.config.target.model_name:
            return self.target_embedder()
        if model not in self._others:
            self._others[model] = self._spec().for_model(model).load()
        return self._others[model]

    def rechunk(self, conn: psycopg.Connection) -> int:
        """New versions for documents still cut with other settings (no-op without ``chunking``)."""
        if self.config.chunking is None:
            return 0
        done = rechunk_pass(
            conn,
            chunking=self.config.chunking,
            models=lambda: reembed_repo.write_models(conn, alias=self.config.alias),
            embedder_for=self._embedder_for,
            target_model=self.config.target.model_name,
            counts=self.rechunked,
            skipped=self._skipped,
        )
        conn.commit()
        return done

    def stale(self, conn: psycopg.Connection) -> int:
        if self.config.chunking is None:
            return 0
        found = reembed_repo.stale_documents(
            conn, chunking=self.config.chunking.label, exclude=sorted(self._skipped), limit=1
        )
        conn.commit()
        return len(found)

    def run(self, conn: psycopg.Connection, on_batch: Callable[[int], None]) -> int:
        """One pass over the missing chunks; returns how many vectors were written."""
        batches = _batches(conn, self.config.target.model_name, self.config.batch_chunks)
        written, self._began = 0, 0.0
        for rows, vectors in self._embedded(batches):
            with conn.transaction():
                new = reembed_repo.write_vectors(
                    conn, model=self.config.target.model_name, rows=rows, vectors=vectors
                )
            written += new
            on_batch(new)
        if self._began:
            self.embedding_window = (self._began, time.time())
        return written

    def _embedded(self, batches: Iterator[Batch]) -> Iterator[Embedded]:
        if not self.config.use_ray:
            embedder = self.target_embedder()
            for rows, texts in batches:
                self._began = self._began or time.time()
                self.encoded += len(texts)
                yield rows, embedder.embed(texts)
            return
        yield from self._on_ray(batches)

    def _on_ray(self, batches: Iterator[Batch]) -> Iterator[Embedded]:
        from ray.util import ActorPool

        if self._pool is None:
            import ray

            started = time.monotonic()
            self._actors = self._start_actors()
            ray.get([a.ready.remote() for a in self._actors])
            self.startup_seconds += time.monotonic() - started
            self._pool = ActorPool(self._actors)
        pool, in_flight, limit = self._pool, 0, 2 * len(self._actors)
        for rows, texts in batches:
            self._began = self._began or time.time()
            self.encoded += len(texts)
            pool.submit(lambda a, b: a.embed.remote(*b), (rows, texts))
            in_flight += 1
            if in_flight >= limit:  # two batches queued per actor keep every actor busy
                in_flight -= 1
                yield pool.get_next_unordered()
        while in_flight:
            in_flight -= 1
            yield pool.get_next_unordered()

    def _start_actors(self) -> list[Any]:
        """CPU actors, or one GPU actor per GPU (up to ``actors``) when the cluster has GPUs."""
        import ray

        ensure_ray(address=self.config.ray_address, data_dir=self.config.data_dir)
        gpus = int(ray.cluster_resources().get("GPU", 0))
        spec = self._spec()
        if gpus:
            spec = dataclasses.replace(spec, device="cuda")
        # OpenMP/MKL read their pool sizes at import: set them in the actor's environment.
        threads = str(self.config.threads)
        env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        remote = ray.remote(
            num_cpus=0 if gpus else 1, num_gpus=1 if gpus else 0, runtime_env={"env_vars": env}
        )(_EmbedActor)
        count = min(self.config.actors, gpus) if gpus else self.config.actors
        return [remote.remote(spec, self._isolation()) for _ in range(count)]

    def close(self) -> None:
        if self._lane is not None:
            self._lane.close()
            self._lane, self._embedder = None, None
        if self._pool is not None:
            import ray

            for actor in self._actors:
                ray.kill(actor)
            self._pool, self._actors = None, []

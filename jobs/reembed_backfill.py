"""The backfill of a model migration: target vectors for every live chunk still lacking one.

Embeds in batches on Ray actors (one GPU each when the cluster has GPUs, else CPU actors) or
inline in the job's thread, always at lower priority (``nice`` and few intra-op threads) so
serving keeps the CPU, and commits every batch: a killed job resumes with the chunks still
missing and never re-embeds a committed one. Re-chunking (``jobs.rechunk``) runs here too.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import psycopg

from catalog import reembed as reembed_repo
from index.embedder import Embedder, EmbeddingSpec
from ingest.pipeline import ChunkingConfig
from jobs.ray_runtime import ensure_ray
from jobs.rechunk import RechunkCounts, rechunk_pass
from retrieve.delta import lexical_text

log = logging.getLogger(__name__)


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
    def nice(self) -> int: ...
    @property
    def threads(self) -> int: ...
    @property
    def use_ray(self) -> bool: ...
    @property
    def ray_address(self) -> str | None: ...
    @property
    def data_dir(self) -> Path: ...


def lower_priority(nice: int, threads: int) -> None:
    """Run this thread at ``nice`` (Linux niceness is per thread) with ``threads`` torch threads."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except (AttributeError, OSError):  # not Linux, or not allowed: run at normal priority
        log.warning("could not lower the migration's priority to nice %d", nice)
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:
        pass


class _EmbedActor:
    """A Ray actor embedding migration batches at lower priority (one GPU each when present)."""

    def __init__(self, spec: EmbeddingSpec, nice: int) -> None:
        lower_priority(nice, spec.threads or 1)
        self.embedder = spec.load()

    def ready(self) -> bool:
        return True

    def embed(self, rows: list[int], texts: list[str]) -> tuple[list[int], np.ndarray]:
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
        self._embedder: Embedder | None = None
        self._pool: Any = None
        self._actors: list[Any] = []

        self.rechunked = RechunkCounts()
        self._skipped: set[int] = set()
        self._others: dict[str, Embedder] = {}

    def _spec(self) -> EmbeddingSpec:
        return dataclasses.replace(self.config.target, threads=self.config.threads)

    def target_embedder(self) -> Embedder:
        """The target model in this thread (inline path, re-chunking), at lower priority."""
        if self._embedder is None:
            started = time.monotonic()
            lower_priority(self.config.nice, self.config.threads)
            self._embedder = self._spec().load()
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
        written = 0
        for rows, vectors in self._embedded(batches):
            with conn.transaction():
                new = reembed_repo.write_vectors(
                    conn, model=self.config.target.model_name, rows=rows, vectors=vectors
                )
            written += new
            on_batch(new)
        return written

    def _embedded(self, batches: Iterator[Batch]) -> Iterator[Embedded]:
        if not self.config.use_ray:
            embedder = self.target_embedder()
            for rows, texts in batches:
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
        remote = ray.remote(num_cpus=0 if gpus else 1, num_gpus=1 if gpus else 0)(_EmbedActor)
        count = min(self.config.actors, gpus) if gpus else self.config.actors
        return [remote.remote(spec, self.config.nice) for _ in range(count)]

    def close(self) -> None:
        if self._pool is not None:
            import ray

            for actor in self._actors:
                ray.kill(actor)
            self._pool, self._actors = None, []

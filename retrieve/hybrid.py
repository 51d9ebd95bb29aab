"""Permission-filtered hybrid retrieval over a ``ServingIndex``.

Every search takes an ``AclFilter``: it is turned into per-position masks before any
index is touched, and each strategy (exact, filtered traversal, over-fetch with check,
BM25 with mask) returns only allowed positions, so a chunk the caller cannot read never
enters a candidate list.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from authz.acl import AclFilter
from core.records import Hit
from index.bm25_shards import LexicalShard, LexicalStats
from index.faiss_shards import exact_search
from retrieve.planner import SearchPlan, plan_search, search_shard
from retrieve.serving import ServingIndex, ServingState


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    """The filtered-search strategy's thresholds; the defaults live in ``RetrieveSettings``
    and ``IndexSettings`` (``hnsw_ef_search``, ``ivf_nprobe``)."""

    exact_max_allowed: int
    exact_max_fraction: float
    overfetch_min_fraction: float
    ef_search: int
    nprobe: int


@dataclass(frozen=True, slots=True)
class Masks:
    """Allowed positions per shard and in the delta, with their counts (counted once)."""

    shards: tuple[np.ndarray, ...]
    delta: np.ndarray
    shard_counts: tuple[int, ...]
    delta_count: int
    documents: int  # readable documents in the catalog view (whether or not this process holds their shards)

    @property
    def allowed(self) -> int:
        return sum(self.shard_counts) + self.delta_count


@dataclass(slots=True)
class StageLog:
    timings_ms: dict[str, float] = field(default_factory=dict)
    degraded: list[dict[str, str]] = field(default_factory=list)
    plans: list[str] = field(default_factory=list)

    def time(self, stage: str, started: float) -> None:
        self.timings_ms[stage] = round((time.perf_counter() - started) * 1000, 3)

    def degrade(self, stage: str, reason: str) -> None:
        self.degraded.append({"stage": stage, "reason": reason})


def build_masks(state: ServingState, snap: ServingIndex, acl: AclFilter) -> Masks:
    """Per-position masks for every shard and the delta, under the view lock."""
    view = state.view
    with view.lock:
        docs = view.allowed_documents(acl)
        shards = tuple(
            view.chunk_mask(docs, d, v) for d, v in zip(snap.shard_doc_idx, snap.shard_versions, strict=True)
        )
        delta = view.chunk_mask(docs, snap.delta_doc_idx, snap.delta.versions)
    counts = tuple(int(np.count_nonzero(m)) for m in shards)
    return Masks(shards, delta, counts, int(np.count_nonzero(delta)), int(np.count_nonzero(docs)))


def _merge(parts: list[list[Hit]], k: int) -> list[Hit]:
    merged = [h for part in parts for h in part]
    merged.sort(key=lambda h: (-h.score, h.chunk_id))
    return merged[:k]


class HybridSearcher:
    """Dense and lexical candidate generation with per-shard fan-out and stage timeouts."""

    def __init__(
        self, state: ServingState, *, planner: PlannerConfig, pool: ThreadPoolExecutor, stage_timeout_s: float
    ) -> None:
        self.state = state
        self.planner = planner
        self.pool = pool
        self.timeout = stage_timeout_s

    def dense(
        self, snap: ServingIndex, masks: Masks, query_vec: np.ndarray, k: int, log: StageLog
    ) -> list[Hit]:
        q = np.ascontiguousarray(query_vec.reshape(1, -1), dtype=np.float32)
        tasks: list[tuple[str, Callable[[], list[Hit]]]] = []
        shards = snap.version.shards if snap.version else ()
        for shard, mask, allowed in zip(shards, masks.shards, masks.shard_counts, strict=True):
            plan = self._plan(shard.dense.kind, allowed, shard.dense.ntotal, k)
            log.plans.append(f"shard{shard.shard}:{plan.strategy}:{plan.allowed_count}/{plan.total}")
            tasks.append((f"shard{shard.shard}", partial(self._dense_shard, shard, q, k, mask, plan)))
        parts = self._fan_out("dense", tasks, log)
        if masks.delta_count:
            parts.append(self._dense_delta(snap, masks.delta, q, k))
        return _merge(parts, k)

    def _plan(self, kind: str, n_allowed: int, n_total: int, k: int) -> SearchPlan:
        p = self.planner
        return plan_search(
            n_allowed=n_allowed,
            n_total=n_total,
            k=k,
            kind=kind,  # type: ignore[arg-type]
            exact_max_allowed=p.exact_max_allowed,
            exact_max_fraction=p.exact_max_fraction,
            overfetch_min_fraction=p.overfetch_min_fraction,
            base_ef_search=p.ef_search,
            base_nprobe=p.nprobe,
        )

    @staticmethod
    def _dense_shard(shard, q: np.ndarray, k: int, mask: np.ndarray, plan: SearchPlan) -> list[Hit]:
        if plan.allowed_count == 0:
            return []
        allowed = None if plan.allowed_count == plan.total else mask
        scores, pos = search_shard(shard.dense, q, k, allowed, plan)
        rows = shard.row_ids
        return [
            Hit(int(rows[p]), float(s), "dense") for s, p in zip(scores[0], pos[0], strict=True) if p >= 0
        ]

    @staticmethod
    def _dense_delta(snap: ServingIndex, mask: np.ndarray, q: np.ndarray, k: int) -> list[Hit]:
        scores, pos = exact_search(snap.delta.vectors, q, k, mask)
        rows = snap.delta.rows
        return [
            Hit(int(rows[p]), float(s), "dense") for s, p in zip(scores[0], pos[0], strict=True) if p >= 0
        ]

    @staticmethod
    def lexical_stats(snap: ServingIndex, query: str, *, delta: bool = True) -> LexicalStats:
        """The query terms' collection statistics over the snapshot's shards (and its delta)."""
        segments = [shard.lexical for shard in (snap.version.shards if snap.version else ())]
        if delta and snap.delta.lexical is not None:
            segments.append(snap.delta.lexical)
        return LexicalStats.total(segment.stats(query) for segment in segments)

    def lexical(
        self,
        snap: ServingIndex,
        masks: Masks,
        query: str,
        k: int,
        log: StageLog,
        stats: LexicalStats | None = None,
    ) -> list[Hit]:
        """BM25 over every shard and the delta, all scored with one set of collection
        statistics (summed over the segments for the query's terms), so a document scores
        the same whichever segment holds it. The statistics count every document, readable or
        not, as each shard's own did: masks decide what is returned, never how it scores.
        ``stats`` are given when this snapshot holds only some of the segments (a shard server:
        the fan-out sums every server's ``lexical_stats`` first)."""
        stats = stats or self.lexical_stats(snap, query)
        tasks: list[tuple[str, Callable[[], list[Hit]]]] = [
            (
                f"shard{shard.shard}",
                partial(self._lexical_one, shard.lexical, shard.row_ids, query, k, mask, stats),
            )
            for shard, mask, allowed in zip(
                snap.version.shards if snap.version else (), masks.shards, masks.shard_counts, strict=True
            )
            if allowed
        ]
        parts = self._fan_out("lexical", tasks, log)
        if snap.delta.lexical is not None and masks.delta_count:
            parts.append(self._lexical_one(snap.delta.lexical, snap.delta.rows, query, k, masks.delta, stats))
        return _merge(parts, k)

    @staticmethod
    def _lexical_one(
        shard: LexicalShard, rows: np.ndarray, query: str, k: int, mask: np.ndarray, stats: LexicalStats
    ) -> list[Hit]:
        scores, pos = shard.search(query, k, allowed=mask, stats=stats)
        return [Hit(int(rows[p]), float(s), "lexical") for s, p in zip(scores, pos, strict=True)]

    def _fan_out(
        self, stage: str, tasks: list[tuple[str, Callable[[], list[Hit]]]], log: StageLog
    ) -> list[list[Hit]]:
        """Run shard searches: all but the first on the pool, the first in this thread.

        Running one shard here saves a thread hand-off per stage (each one a GIL round trip
        under load) and keeps the caller busy instead of waiting. Errors degrade the stage;
        the pool's shards are given up after the stage timeout (the inline one cannot be cut
        short, but its result still counts only if it finished in time).
        """
        if not tasks:
            return []
        started = time.monotonic()
        futures = [(name, self.pool.submit(fn)) for name, fn in tasks[1:]]
        first_name, first = tasks[0]
        parts: list[list[Hit]] = []
        try:
            hits = first()
        except Exception as exc:  # one broken shard degrades the answer, never fails it
            log.degrade(stage, f"{first_name} failed: {type(exc).__name__}")
        else:
            if time.monotonic() - started <= self.timeout:
                parts.append(hits)
            else:
                log.degrade(stage, f"{first_name} timed out after {self.timeout:.1f}s")
        return parts + self._gather(stage, futures, log, deadline=started + self.timeout)

    def _gather(
        self, stage: str, futures: list[tuple[str, Future[list[Hit]]]], log: StageLog, *, deadline: float
    ) -> list[list[Hit]]:
        parts: list[list[Hit]] = []
        for name, fut in futures:
            try:
                parts.append(fut.result(timeout=max(0.0, deadline - time.monotonic())))
            except FutureTimeout:
                log.degrade(stage, f"{name} timed out after {self.timeout:.1f}s")
            except Exception as exc:  # one broken shard degrades the answer, never fails it
                log.degrade(stage, f"{name} failed: {type(exc).__name__}")
        return parts

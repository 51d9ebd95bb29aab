"""Permission-filtered hybrid retrieval over a ``ServingIndex``.

Every search takes an ``AclFilter``: it is turned into per-position masks before any
index is touched, and each strategy (exact, filtered traversal, over-fetch with check,
BM25 with mask) returns only allowed positions, so a chunk the caller cannot read never
enters a candidate list.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from authz.acl import AclFilter
from core import tracing
from core.records import Hit
from index.bm25_shards import LexicalShard, LexicalStats
from index.faiss_shards import DenseShard, exact_search
from index.search_costs import costs_of
from retrieve.planner import SearchPlan, plan_search, search_shard
from retrieve.serving import ServingIndex, ServingState


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    """The unfiltered search's efSearch / nprobe the planner raises from (``IndexSettings``
    ``hnsw_ef_search``, ``ivf_nprobe``); the choice itself comes from each shard's measured
    costs (``index.search_costs``)."""

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
    tenant_id: str  # whose lexical statistics score the lexical list

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
        tracing.stage_span(stage, started)  # a child span of the request's, when tracing is on

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
    return Masks(
        shards, delta, counts, int(np.count_nonzero(delta)), int(np.count_nonzero(docs)), acl.tenant_id
    )


def tenant_masks(
    state: ServingState, snap: ServingIndex, tenant_id: str
) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """Per-position masks of the tenant's visible chunks (any ACL) in every shard and the
    delta: the scope of its lexical statistics."""
    view = state.view
    with view.lock:
        docs = view.tenant_documents(tenant_id)
        shards = tuple(
            view.chunk_mask(docs, d, v) for d, v in zip(snap.shard_doc_idx, snap.shard_versions, strict=True)
        )
        delta = view.chunk_mask(docs, snap.delta_doc_idx, snap.delta.versions)
    return shards, delta


class _TenantMaskCache:
    """``tenant_masks`` per (view position, tenant) of the newest snapshot asked about: they
    change only when the catalog does, and building them costs ~2 ms per 100k chunks, per
    lexical query. Holds one snapshot only, so a swapped-out version is not kept alive."""

    _MAX = 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snap: ServingIndex | None = None
        self._entries: dict[tuple[int, str], tuple[tuple[np.ndarray, ...], np.ndarray]] = {}

    def get(
        self, state: ServingState, snap: ServingIndex, tenant_id: str
    ) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        with state.view.lock:  # the position and the arrays the masks come from, together
            key = (state.view.position, tenant_id)
            with self._lock:
                hit = self._entries.get(key) if self._snap is snap else None
            if hit is not None:
                return hit
            masks = tenant_masks(state, snap, tenant_id)
            with self._lock:
                if self._snap is not snap or len(self._entries) >= self._MAX:
                    self._snap, self._entries = snap, {}
                self._entries[key] = masks
        return masks


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
        self._tenant_masks = _TenantMaskCache()

    def dense(
        self, snap: ServingIndex, masks: Masks, query_vec: np.ndarray, k: int, log: StageLog
    ) -> list[Hit]:
        q = np.ascontiguousarray(query_vec.reshape(1, -1), dtype=np.float32)
        tasks: list[tuple[str, Callable[[], list[Hit]]]] = []
        shards = snap.version.shards if snap.version else ()
        for shard, mask, allowed in zip(shards, masks.shards, masks.shard_counts, strict=True):
            plan = self._plan(shard.dense, allowed, k)
            log.plans.append(f"shard{shard.shard}:{plan.strategy}:{plan.allowed_count}/{plan.total}")
            tasks.append((f"shard{shard.shard}", partial(self._dense_shard, shard, q, k, mask, plan)))
        parts = self._fan_out("dense", tasks, log)
        if masks.delta_count:
            parts.append(self._dense_delta(snap, masks.delta, q, k))
        return _merge(parts, k)

    def _plan(self, dense: DenseShard, n_allowed: int, k: int) -> SearchPlan:
        p = self.planner
        return plan_search(
            n_allowed=n_allowed,
            n_total=dense.ntotal,
            k=k,
            kind=dense.kind,
            costs=costs_of(dense),
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

    def lexical_stats(
        self, snap: ServingIndex, query: str, *, tenant_id: str, language: str | None = None
    ) -> LexicalStats:
        """The query terms' collection statistics over the tenant's visible chunks in the
        snapshot's shards and delta: per tenant, so no score depends on another tenant's
        text, and over visible chunks only, so a document scores the same in the delta and,
        after a rebuild, in a shard."""
        shard_masks, delta_mask = self._tenant_masks.get(self.state, snap, tenant_id)
        shards = snap.version.shards if snap.version else ()
        parts = [
            shard.lexical.stats(query, within=mask, language=language)
            for shard, mask in zip(shards, shard_masks, strict=True)
        ]
        if snap.delta.lexical is not None:
            parts.append(snap.delta.lexical.stats(query, within=delta_mask, language=language))
        return LexicalStats.total(parts)

    def lexical(
        self,
        snap: ServingIndex,
        masks: Masks,
        query: str,
        k: int,
        log: StageLog,
        stats: LexicalStats | None = None,
        language: str | None = None,
    ) -> list[Hit]:
        """BM25 over every shard and the delta, all scored with one set of collection
        statistics (summed over the segments for the query's terms), so a document scores
        the same whichever segment holds it. The statistics count every visible chunk of the
        caller's tenant, readable by the caller or not, and nothing of other tenants: ACLs
        decide what is returned, never how it scores, and tenants never see each other's
        terms. ``stats`` are given when this snapshot holds only some of the segments (a
        shard server: the fan-out sums every server's ``lexical_stats`` first)."""
        stats = stats or self.lexical_stats(snap, query, tenant_id=masks.tenant_id, language=language)
        return self._lexical_fan_out(
            snap, masks, k, log, partial(self._lexical_one, query=query, k=k, stats=stats, language=language)
        )

    def lexical_terms(
        self, snap: ServingIndex, masks: Masks, weights: Mapping[str, float], k: int, log: StageLog
    ) -> list[Hit]:
        """:meth:`lexical` for a weighted query of index terms (``LexicalShard.search_terms``),
        scored with the tenant's collection statistics for those terms, under the same masks."""
        shard_masks, delta_mask = self._tenant_masks.get(self.state, snap, masks.tenant_id)
        shards = snap.version.shards if snap.version else ()
        parts = [s.lexical.term_stats(weights, within=m) for s, m in zip(shards, shard_masks, strict=True)]
        if snap.delta.lexical is not None:
            parts.append(snap.delta.lexical.term_stats(weights, within=delta_mask))
        stats = LexicalStats.total(parts)

        def one(shard: LexicalShard, rows: np.ndarray, mask: np.ndarray) -> list[Hit]:
            scores, pos = shard.search_terms(weights, k, allowed=mask, stats=stats)
            return [Hit(int(rows[p]), float(s), "lexical") for s, p in zip(scores, pos, strict=True)]

        return self._lexical_fan_out(snap, masks, k, log, one)

    def _lexical_fan_out(
        self,
        snap: ServingIndex,
        masks: Masks,
        k: int,
        log: StageLog,
        one: Callable[[LexicalShard, np.ndarray, np.ndarray], list[Hit]],
    ) -> list[Hit]:
        """``one(shard, its row ids, its mask)`` on every shard the caller may read (fanned out)
        and on the delta, merged to the best ``k``."""
        tasks: list[tuple[str, Callable[[], list[Hit]]]] = [
            (f"shard{shard.shard}", partial(one, shard.lexical, shard.row_ids, mask))
            for shard, mask, allowed in zip(
                snap.version.shards if snap.version else (), masks.shards, masks.shard_counts, strict=True
            )
            if allowed
        ]
        parts = self._fan_out("lexical", tasks, log)
        if snap.delta.lexical is not None and masks.delta_count:
            parts.append(one(snap.delta.lexical, snap.delta.rows, masks.delta))
        return _merge(parts, k)

    @staticmethod
    def vectors_of(snap: ServingIndex, rows: Sequence[int]) -> dict[int, np.ndarray]:
        """The stored embedding of each of ``rows`` held by the snapshot (shards or delta), as
        indexed: what pseudo-relevance feedback on the dense leg averages. Rows it does not
        hold are left out; callers pass only rows their masks allowed."""
        wanted = np.asarray(sorted(set(rows)), dtype=np.int64)
        out: dict[int, np.ndarray] = {}
        segments = [(s.row_ids, s.dense.vectors) for s in (snap.version.shards if snap.version else ())]
        segments.append((snap.delta.rows, snap.delta.vectors))
        for held, vectors in segments:
            if not len(held) or not len(wanted):
                continue
            order = np.argsort(held, kind="stable")
            at = np.searchsorted(held[order], wanted).clip(0, len(held) - 1)
            hit = np.asarray(held)[order[at]] == wanted
            for row, pos in zip(wanted[hit], order[at][hit], strict=True):
                out[int(row)] = np.asarray(vectors[int(pos)], dtype=np.float32)
        return out

    @staticmethod
    def _lexical_one(
        shard: LexicalShard,
        rows: np.ndarray,
        mask: np.ndarray,
        *,
        query: str,
        k: int,
        stats: LexicalStats,
        language: str | None = None,
    ) -> list[Hit]:
        scores, pos = shard.search(query, k, allowed=mask, stats=stats, language=language)
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

"""Shard servers: shard groups of the live index version held by Ray actors on cluster nodes,
searched by a fan-out that merges their candidate lists.

The security model is the in-process one, per server: each ``ShardServer`` keeps its own
``CatalogView`` (an ``IndexWatcher`` on the catalog), receives the request's ``AclFilter``, the
query vector and text, and the catalog position the caller read, catches up to that position
before searching and builds its masks locally. So a delete or ACL change acknowledged before
the position was read is effective on every server, exactly as in-process. A server that
times out or has died degrades the answer (``degraded`` names it); it never fails it.

Lexical scores use collection statistics summed over every server's segments (the fan-out's
first round), as in-process, so the merged lists equal the in-process ones. Each server loads
only its group's shards of each version it serves (dense and lexical files and their per-shard
catalog positions; ``index.builder.ShardSelection``), so a version larger than one node's
memory is served by enough servers; the API process that fans out loads none.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from authz.acl import AclFilter
from core import tracing
from core.records import Hit
from index.bm25_shards import LexicalStats
from index.builder import ShardSelection
from index.tokenize import Tokenizer
from retrieve.hybrid import HybridSearcher, PlannerConfig, StageLog, build_masks
from retrieve.remote import RemoteLists
from retrieve.serving import ServingState, ShardStats
from retrieve.watcher import IndexWatcher

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ShardServerConfig:
    conninfo: str
    alias: str
    group: int  # this server searches the version's shards numbered group, group + n, ...
    n_groups: int  # n: the number of shard servers
    model_name: str
    dim: int
    tokenizer: Tokenizer
    planner: PlannerConfig
    poll_seconds: float
    stage_timeout_s: float
    # Tracing on in the API: the server installs a provider from these ``OTEL_*`` variables and
    # continues each query's trace (wiring/tracing.py).
    tracing: bool = False
    trace_env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ShardQuery:
    acl: AclFilter
    position: int  # the catalog position the caller read with the principal's groups
    vector: np.ndarray | None  # None: no dense list
    text: str | None  # None: no lexical list
    k: int
    # The query's language (ISO 639-1) for lexical analysis, None: detected.
    language: str | None = None
    # The query terms' statistics summed over every server's segments (the fan-out's first
    # round), so lexical scores compare across servers exactly as they do in one process.
    stats: LexicalStats | None = None
    # The caller's W3C trace context (``traceparent``), empty when it does not trace.
    trace: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ShardAnswer:
    version_id: str
    dense: list[Hit]
    lexical: list[Hit]
    degraded: list[dict[str, str]] = field(default_factory=list)
    plans: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Holding:
    """What a shard server has loaded: its version's shards and delta, and its memory."""

    version_id: str
    shards: tuple[int, ...]
    delta_chunks: int
    serves_delta: bool
    rss_bytes: int


def rss_bytes() -> int:
    """This process's resident set size (Linux ``/proc``; 0 where it cannot be read)."""
    try:
        resident = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return resident * os.sysconf("SC_PAGE_SIZE")


class ShardServer:
    """One shard group's server (run as a Ray actor by ``start_shard_servers``)."""

    def __init__(self, config: ShardServerConfig) -> None:
        from psycopg_pool import ConnectionPool

        self.config = config
        if config.tracing:  # this actor's own process: its environment is its own
            os.environ.update(dict(config.trace_env))
            tracing.install_provider()
        self.pool = ConnectionPool(config.conninfo, min_size=1, max_size=2, open=True)
        self.state = ServingState(
            model_name=config.model_name,
            dim=config.dim,
            tokenizer=config.tokenizer,
            selection=ShardSelection.group_of(config.group, config.n_groups),
        )
        self.watcher = IndexWatcher(
            self.pool, self.state, alias=config.alias, poll_seconds=config.poll_seconds
        )
        self.watcher.start(watch=True)
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="shard")
        self.searcher = HybridSearcher(
            self.state, planner=config.planner, pool=self.executor, stage_timeout_s=config.stage_timeout_s
        )

    def lexical_stats(
        self, text: str, position: int, tenant_id: str, language: str | None = None
    ) -> LexicalStats:
        """This group's share of the tenant's collection statistics for ``text`` (the delta
        counts once, on group 0, the only server that loads it)."""
        self.watcher.catch_up_to(position)
        current = self.state.current
        return self.searcher.lexical_stats(current, text, tenant_id=tenant_id, language=language)

    def search(self, query: ShardQuery) -> ShardAnswer:
        with tracing.continued("shard.search", query.trace, **{"ragline.shard_group": self.config.group}):
            return self._search(query)

    def _search(self, query: ShardQuery) -> ShardAnswer:
        """This group's lists; each stage timed (a child span of ``shard.search`` when traced)."""
        slog = StageLog()
        t = time.perf_counter()
        self.watcher.catch_up_to(query.position)
        snap = self.state.current  # only this group's shards (and the delta on group 0)
        masks = build_masks(self.state, snap, query.acl)
        slog.time("acl_filter", t)
        dense: list[Hit] = []
        if query.vector is not None:
            t = time.perf_counter()
            dense = self.searcher.dense(snap, masks, query.vector, query.k, slog)
            slog.time("dense", t)
        lexical: list[Hit] = []
        if query.text is not None:
            t = time.perf_counter()
            lexical = self.searcher.lexical(
                snap, masks, query.text, query.k, slog, query.stats, query.language
            )
            slog.time("lexical", t)
        return ShardAnswer(snap.version_id, dense, lexical, slog.degraded, slog.plans)

    def holding(self) -> Holding:
        """The shards and delta this server loaded for its current version, and its RSS."""
        snap = self.state.current
        return Holding(
            snap.version_id,
            tuple(p.shard for p in snap.version.shards) if snap.version else (),
            len(snap.delta.rows),
            self.state.selection.delta,
            rss_bytes(),
        )

    def shard_stats(self) -> list[ShardStats]:
        return self.state.shard_stats()

    def node_id(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def close(self) -> None:
        self.watcher.close()
        self.executor.shutdown(wait=False)
        self.pool.close()


def start_shard_servers(template: ShardServerConfig, *, n_servers: int, num_cpus: float = 0.5) -> list[Any]:
    """Ray actors serving the version's shards in groups; returns once every one has loaded."""
    import ray

    # Threaded actors: requests from several API threads search one server concurrently, as
    # they do in-process (the serving state is built for concurrent readers).
    actor: Any = ray.remote(ShardServer).options(num_cpus=num_cpus, max_restarts=0, max_concurrency=8)
    servers = [actor.remote(replace(template, group=i, n_groups=n_servers)) for i in range(n_servers)]
    nodes = ray.get([s.node_id.remote() for s in servers])
    log.info("%d shard servers up on nodes %s", len(servers), sorted(set(nodes)))
    return servers


@dataclass(frozen=True, slots=True)
class FanoutAnswer:
    dense: list[Hit]
    lexical: list[Hit]
    versions: tuple[str, ...]  # each answering server's index version
    degraded: list[dict[str, str]]


def _merge(parts: Sequence[list[Hit]], k: int) -> list[Hit]:
    merged = [h for part in parts for h in part]
    merged.sort(key=lambda h: (-h.score, h.chunk_id))  # the in-process merge order
    return merged[:k]


class ShardFanout:
    """Sends one ``ShardQuery`` to every shard server and merges their lists
    (``retrieve.remote.RemoteShards`` for the search service)."""

    def __init__(self, servers: Sequence[Any], *, timeout_s: float) -> None:
        self.servers = list(servers)
        self.timeout_s = timeout_s

    def _gather(self, refs: Sequence[Any]) -> list[Any]:
        """Every call's answer, or the exception it ended with, waiting ``timeout_s`` for all of
        them together (k hung servers cost one timeout, not k); a call still running then is
        cancelled and reported as a ``GetTimeoutError``."""
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=self.timeout_s)
        done = set(ready)
        out: list[Any] = []
        for ref in refs:
            if ref not in done:
                with contextlib.suppress(Exception):  # best effort: the answer does not wait for it
                    ray.cancel(ref)
                out.append(GetTimeoutError())
                continue
            try:
                out.append(ray.get(ref, timeout=0))
            except (RayError, GetTimeoutError) as exc:  # a dead server degrades, never fails
                out.append(exc)
        return out

    def search(self, query: ShardQuery) -> FanoutAnswer:
        from ray.exceptions import GetTimeoutError

        degraded: list[dict[str, str]] = []
        servers = list(enumerate(self.servers))
        query = replace(query, trace=tracing.carrier())  # the servers continue this trace
        if query.text is not None:
            tenant = query.acl.tenant_id
            stats, failed = self._global_stats(query.text, query.position, tenant, query.language)
            query = replace(query, stats=stats)
            for i, reason in failed.items():  # a server that failed round one is not asked again
                degraded.append({"stage": "shards", "reason": f"server{i} failed: {reason}"})
            servers = [(i, s) for i, s in servers if i not in failed]
        got = self._gather([s.search.remote(query) for _, s in servers])
        answers: list[ShardAnswer] = []
        for (i, _), answer in zip(servers, got, strict=True):
            if isinstance(answer, GetTimeoutError):
                degraded.append(
                    {"stage": "shards", "reason": f"server{i} timed out after {self.timeout_s:.1f}s"}
                )
            elif isinstance(answer, Exception):
                degraded.append({"stage": "shards", "reason": f"server{i} failed: {type(answer).__name__}"})
            else:
                answers.append(answer)
        for answer in answers:
            degraded.extend(answer.degraded)
        return FanoutAnswer(
            _merge([a.dense for a in answers], query.k),
            _merge([a.lexical for a in answers], query.k),
            tuple(a.version_id for a in answers),
            degraded,
        )

    def _global_stats(
        self, text: str, position: int, tenant_id: str, language: str | None = None
    ) -> tuple[LexicalStats, dict[int, str]]:
        """Round one of a lexical query: every server's statistics of the tenant for its
        segments, summed, and the servers that did not answer (by index, with the error's name)."""
        got = self._gather(
            [s.lexical_stats.remote(text, position, tenant_id, language) for s in self.servers]
        )
        failed = {i: type(x).__name__ for i, x in enumerate(got) if isinstance(x, Exception)}
        return LexicalStats.total([x for x in got if not isinstance(x, Exception)]), failed

    def lists(
        self,
        *,
        acl: AclFilter,
        position: int,
        vector: np.ndarray | None,
        text: str | None,
        k: int,
        language: str | None = None,
    ) -> RemoteLists:
        got = self.search(ShardQuery(acl, position, vector, text, k, language))
        return RemoteLists(got.dense, got.lexical, got.degraded)

    def shard_stats(self) -> list[ShardStats]:
        """Each answering server's shards (a server that fails or times out is left out)."""
        got = self._gather([s.shard_stats.remote() for s in self.servers])
        return sorted((s for x in got if not isinstance(x, Exception) for s in x), key=lambda s: s.shard)

    def close(self) -> None:
        import ray

        for server in self.servers:
            with contextlib.suppress(Exception):
                ray.kill(server)

"""Shard servers: shard groups of the live index version held by Ray actors on cluster nodes,
searched by a fan-out that merges their candidate lists.

The security model is the in-process one, per server: each ``ShardServer`` keeps its own
``CatalogView`` (an ``IndexWatcher`` on the catalog), receives the request's ``AclFilter``, the
query vector and text, and the catalog position the caller read, catches up to that position
before searching and builds its masks locally. So a delete or ACL change acknowledged before
the position was read is effective on every server, exactly as in-process. A server that
times out or has died degrades the answer (``degraded`` names it); it never fails it.

Lexical scores use collection statistics summed over every server's segments (the fan-out's
first round), as in-process, so the merged lists equal the in-process ones. Round one's sum is
kept for a query repeated at the same catalog position, which then sends one round only. Each
server loads only its group's shards of each version it serves (dense and lexical files and their per-shard
catalog positions; ``index.builder.ShardSelection``), so a version larger than one node's
memory is served by enough servers; the API process that fans out loads none.

A server whose process dies is recreated by Ray and reloads the alias's version by itself; the
fan-out skips it meanwhile and readmits it once ready (``jobs.shard_health`` says how and why
actors rather than Ray Serve). One answer never mixes versions: the fan-out keeps the lists of
one version (the one it serves, confirmed on every server at each swap by ``await_version``)
and names a server that answered from another in ``degraded``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import Counter, OrderedDict
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
from jobs.shard_health import ServerHealth, ShardServersNotReadyError
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

    def ready(self) -> Holding:
        """The readiness probe: answers only once ``__init__`` (the shard load) has ended, so a
        restarted server answers it when it can search; the fan-out checks the version."""
        return self.holding()

    def pid(self) -> int:
        """This actor's worker process (operators and the recovery test kill it)."""
        return os.getpid()

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
    """Ray actors serving the version's shards in groups; returns once every one has loaded.

    Ray restarts a server whose process dies, without limit (``max_restarts=-1``: a server that
    keeps dying keeps its shards missing from answers, which ``degraded`` says, rather than
    going for good after some count); a call in flight then fails, never replayed
    (``max_task_retries=0``). ``ray.kill`` ends one for good.
    """
    import ray

    # Threaded actors: requests from several API threads search one server concurrently, as
    # they do in-process (the serving state is built for concurrent readers).
    actor: Any = ray.remote(ShardServer).options(
        num_cpus=num_cpus, max_restarts=-1, max_task_retries=0, max_concurrency=8
    )
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


def _one_version(
    answers: Sequence[tuple[int, ShardAnswer]], serving: str | None
) -> tuple[list[ShardAnswer], list[dict[str, str]]]:
    """The answers of one version, and a ``degraded`` entry per server left out.

    Servers follow the alias each on its own, so during a swap (or after a restart) they may
    answer from two versions, whose shard groups differ (another shard count re-deals the
    chunks): merged, such lists could hold a chunk twice or miss one silently. The version the
    fan-out serves wins when any server answered from it, else the most common one.
    """
    versions = Counter(a.version_id for _, a in answers)
    if len(versions) <= 1:
        return [a for _, a in answers], []
    keep = serving if serving in versions else versions.most_common(1)[0][0]
    other = [
        {"stage": "shards", "reason": f"server{i} answered from version {a.version_id}, not {keep}"}
        for i, a in answers
        if a.version_id != keep
    ]
    return [a for _, a in answers if a.version_id == keep], other


def _merge(parts: Sequence[list[Hit]], k: int) -> list[Hit]:
    merged = [h for part in parts for h in part]
    merged.sort(key=lambda h: (-h.score, h.chunk_id))  # the in-process merge order
    return merged[:k]


STATS_CACHE = 4096


class ShardFanout:
    """Sends one ``ShardQuery`` to every shard server that is up and merges their lists
    (``retrieve.remote.RemoteShards`` for the search service); ``health`` tracks which are up."""

    def __init__(self, servers: Sequence[Any], *, timeout_s: float, swap_wait_s: float = 60.0) -> None:
        self.servers = list(servers)
        self.timeout_s = timeout_s
        self.swap_wait_s = swap_wait_s
        self.health = ServerHealth(self.servers)
        # Round one's sums by (version, servers asked, tenant, position, language, text): a
        # query repeated at the same catalog position skips the round (STATS_CACHE entries, the
        # oldest dropped first). Collection statistics decide scores, never what a caller may
        # read (each server builds its masks per request), and are per tenant.
        self._stats: OrderedDict[tuple[object, ...], LexicalStats] = OrderedDict()
        self._stats_lock = threading.Lock()
        # The version every server was confirmed to hold (at start, or by ``await_version``).
        self.version: str | None = self._confirm()

    def _confirm(self) -> str | None:
        """Each server's shards, and the version most of them hold (None if none answers)."""
        got = self._gather([s.ready.remote() for s in self.servers])
        held: list[Holding] = []
        for i, x in enumerate(got):
            if isinstance(x, Exception):
                self._failed(i, x)
            else:
                self.health.note(i, x)
                held.append(x)
        versions = Counter(h.version_id for h in held)
        return versions.most_common(1)[0][0] if versions else None

    def _gather(self, refs: Sequence[Any]) -> list[Any]:
        """Every call's answer, or the exception it ended with, waiting ``timeout_s`` for all of
        them together (k hung servers cost one timeout, not k); a call still running then is
        cancelled and reported as a ``GetTimeoutError``."""
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        if not refs:
            return []
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

    def _failed(self, i: int, exc: Exception) -> None:
        """A server whose process is gone (or restarting) is skipped until it is ready again;
        an error raised by its code, or a timeout, leaves it in (it is alive)."""
        from ray.exceptions import RayActorError

        if isinstance(exc, RayActorError):
            self.health.mark_down(i, f"failed: {type(exc).__name__}")

    def search(self, query: ShardQuery) -> FanoutAnswer:
        """Every up server's lists for ``query``, merged."""
        from ray.exceptions import GetTimeoutError

        servers = [(i, self.servers[i]) for i in self.health.up(self.version)]
        degraded = self.health.missing()
        query = replace(query, trace=tracing.carrier())  # the servers continue this trace
        if query.text is not None:
            tenant = query.acl.tenant_id
            key = (
                self.version,
                tuple(i for i, _ in servers),
                tenant,
                query.position,
                query.language,
                query.text,
            )
            stats = self._known_stats(key)
            if stats is None:
                stats, failed = self._global_stats(
                    servers, query.text, query.position, tenant, query.language
                )
                for i, reason in failed.items():  # a server that failed round one is not asked again
                    degraded.append({"stage": "shards", "reason": f"server{i} failed: {reason}"})
                servers = [(i, s) for i, s in servers if i not in failed]
                if not failed:  # a partial sum is never kept
                    self._keep_stats(key, stats)
            query = replace(query, stats=stats)
        got = self._gather([s.search.remote(query) for _, s in servers])
        answers: list[tuple[int, ShardAnswer]] = []
        for (i, _), answer in zip(servers, got, strict=True):
            if isinstance(answer, GetTimeoutError):
                degraded.append(
                    {"stage": "shards", "reason": f"server{i} timed out after {self.timeout_s:.1f}s"}
                )
            elif isinstance(answer, Exception):
                degraded.append({"stage": "shards", "reason": f"server{i} failed: {type(answer).__name__}"})
                self._failed(i, answer)
            else:
                answers.append((i, answer))
        kept, other = _one_version(answers, self.version)
        degraded.extend(other)
        for answer in kept:
            degraded.extend(answer.degraded)
        return FanoutAnswer(
            _merge([a.dense for a in kept], query.k),
            _merge([a.lexical for a in kept], query.k),
            tuple(a.version_id for a in kept),
            degraded,
        )

    def await_version(self, version_id: str) -> None:
        """Wait until every server holds ``version_id`` (each follows the alias itself), at
        most ``swap_wait_s``; the API's watcher calls it before it swaps (``before_swap``).

        Raises:
            ShardServersNotReadyError: a server is down, restarting or still on another
                version when the time is up; the API keeps its version and the fan-out keeps
                answering from it, and the watcher tries again on its next tick.
        """
        deadline = time.monotonic() + self.swap_wait_s
        while True:
            got = self._gather([s.ready.remote() for s in self.servers])
            behind: dict[int, str] = {}
            for i, x in enumerate(got):
                if isinstance(x, Exception):
                    behind[i] = type(x).__name__
                elif x.version_id != version_id:
                    behind[i] = f"serves {x.version_id}"
            if not behind:
                self.version = version_id
                for i, x in enumerate(got):
                    self.health.note(i, x)
                return
            if time.monotonic() >= deadline:
                missing = "; ".join(f"server{i}: {why}" for i, why in sorted(behind.items()))
                raise ShardServersNotReadyError(
                    f"shard servers have not loaded version {version_id} after {self.swap_wait_s:g}s"
                    f" ({missing}); still serving {self.version}"
                )
            time.sleep(0.2)

    def _known_stats(self, key: tuple[object, ...]) -> LexicalStats | None:
        with self._stats_lock:
            stats = self._stats.get(key)
            if stats is not None:
                self._stats.move_to_end(key)
            return stats

    def _keep_stats(self, key: tuple[object, ...], stats: LexicalStats) -> None:
        with self._stats_lock:
            self._stats[key] = stats
            while len(self._stats) > STATS_CACHE:
                self._stats.popitem(last=False)

    def _global_stats(
        self,
        servers: Sequence[tuple[int, Any]],
        text: str,
        position: int,
        tenant_id: str,
        language: str | None,
    ) -> tuple[LexicalStats, dict[int, str]]:
        """Round one of a lexical query: the statistics of the tenant for each of ``servers``'
        segments, summed, and the servers that did not answer (by index, with the error's name)."""
        got = self._gather([s.lexical_stats.remote(text, position, tenant_id, language) for _, s in servers])
        failed: dict[int, str] = {}
        for (i, _), x in zip(servers, got, strict=True):
            if isinstance(x, Exception):
                failed[i] = type(x).__name__
                self._failed(i, x)
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

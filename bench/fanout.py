"""Shard-server fan-out: what a retrieve pays for its candidate lists coming from shard servers
(Ray actors) instead of its own process, and where that time goes.

Run: ``OPENBLAS_NUM_THREADS=1 HF_HUB_OFFLINE=1 python -m bench.fanout --docs 300 --blocks 8 --queries 40``.

On a throwaway PostgreSQL: ``--docs`` Cranfield documents (the bundled samples where the shared
data is absent) ingested inline with the bundled model, one flat ``--shards``-shard version on
``live``, local Ray. Two search services in this process, built as ``ragline serve`` builds
them (``wiring.search.build_search_service``) and sharing one embedder: in-process (the
baseline) and fanning out to ``--servers`` shard servers. Blocks of ``--queries`` sequential
hybrid retrieves (Cranfield's own queries, top 8; with ``--distinct`` each text made unique by a
serial word that matches nothing, so no cache answers) alternate between the two; the overhead is
fan-out minus in-process, paired per block (the median of the pairs), so the machine's drift
cancels.

Then where it goes, on the fan-out's own servers with the same queries, sequentially:
- ping: one empty call to every server at once, the floor of a round through Ray;
- round one: the lexical statistics round alone; round two: the search round alone (the
  statistics and the vector given), each a call to every server at once;
- payload: pickling the query for each server and their answers back, and unpickling them, in
  this process (with Ray's own cloudpickle);
- embed: the query embedding alone (a cache hit where queries repeat).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg

from authz.acl import AclFilter
from bench.common import print_table
from bench.ingest import CRANFIELD, MODEL, READER, TENANT, load_line
from bench.shard_recovery import QUERIES, _corpus
from catalog import changes as changes_repo
from core.settings import Settings
from index.embedder import load_embedder
from jobs.shard_servers import ShardFanout, ShardQuery
from retrieve.service import RetrieveRequest, SearchService
from testkit.clusters import throwaway_cluster
from wiring.search import build_search_service

CRANFIELD_QUERIES = CRANFIELD.parent / "queries.jsonl"


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.fanout",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--docs", type=int, default=300)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--servers", type=int, default=2)
    p.add_argument("--blocks", type=int, default=8, help="block pairs (in-process, fan-out), alternating")
    p.add_argument("--queries", type=int, default=40, help="sequential retrieves per block")
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument(
        "--distinct",
        action="store_true",
        help="every retrieve's text unique (a serial word appended): no embedding or statistics"
        " cache hits, as with queries that do not repeat",
    )
    return p.parse_args(argv)


def _queries(n: int) -> list[str]:
    if not CRANFIELD_QUERIES.exists():
        return [QUERIES[i % len(QUERIES)] for i in range(n)]
    with CRANFIELD_QUERIES.open(encoding="utf-8") as fh:
        texts = [json.loads(line)["text"].strip() for line in fh]
    return [texts[i % len(texts)] for i in range(n)]


def _block(
    service: SearchService,
    acl: AclFilter,
    queries: Sequence[str],
    top_k: int,
    stages: dict[str, list[float]] | None = None,
) -> list[float]:
    """Each retrieve's wall ms (and its stages' ms into ``stages``); the answers must be whole
    (a degraded one stops the bench)."""
    out = []
    for q in queries:
        t = time.perf_counter()
        got = service.retrieve(RetrieveRequest(query=q, top_k=top_k, max_context_tokens=2000), acl)
        out.append((time.perf_counter() - t) * 1000)
        if got.degraded:
            raise SystemExit(f"bench.fanout: a degraded answer: {got.degraded}")
        for stage, ms in (got.timings_ms if stages is not None else {}).items():
            stages.setdefault(stage, []).append(ms)  # type: ignore[union-attr]
    return out


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t) * 1000, out


def _parts(fanout: ShardFanout, embedder: Any, query: ShardQuery) -> dict[str, float]:
    """One query's parts (module docstring), each timed on its own."""
    import ray
    from ray import cloudpickle

    servers = list(enumerate(fanout.servers))
    text, position, tenant = query.text or "", query.position, query.acl.tenant_id
    ms: dict[str, float] = {}
    ms["embed"], vec = _timed(lambda: embedder.submit(text).result())
    ms["ping"], _ = _timed(lambda: ray.get([s.pid.remote() for _, s in servers]))
    ms["round one"], (stats, _) = _timed(lambda: fanout._global_stats(servers, text, position, tenant, None))
    full = ShardQuery(query.acl, position, vec, text, query.k, stats=stats)
    ms["round two"], answers = _timed(lambda: ray.get([s.search.remote(full) for _, s in servers]))
    ms["payload"], _ = _timed(
        lambda: [
            (cloudpickle.loads(cloudpickle.dumps(full)), cloudpickle.loads(cloudpickle.dumps(a)))
            for a in answers
        ]
    )
    return ms


def _breakdown(
    fanout: ShardFanout, service: SearchService, url: str, acl: AclFilter, queries: Sequence[str], top_k: int
) -> list[list[object]]:
    embedder = service.embedders.get(service.state.current.model)
    with psycopg.connect(url, autocommit=True) as conn:
        position = changes_repo.current_position(conn)
    got = [_parts(fanout, embedder, ShardQuery(acl, position, None, q, top_k)) for q in queries]
    return [
        [name, statistics.median(v), sorted(v)[int(0.95 * (len(v) - 1))]]
        for name in got[0]
        for v in [[g[name] for g in got]]
    ]


def main(argv: Sequence[str] | None = None) -> int:
    from jobs.ray_runtime import ensure_ray

    args = _args(argv)
    print(f"command: python -m bench.fanout {' '.join(sys.argv[1:] if argv is None else argv)}")
    print(load_line())
    queries = _queries(args.queries)
    acl = AclFilter(TENANT, frozenset({READER}))
    with throwaway_cluster("ragline-bench-fanout-") as (cluster, tmp):
        from bench.ingest import fresh_database

        url = fresh_database(cluster, "fanout")
        base = {"data_dir": tmp, "database_url": url, "log_level": "WARNING"}
        settings = Settings(**base, index={"shards": args.shards})  # type: ignore[arg-type]
        embedder = load_embedder(MODEL, batch_size=settings.ingest.embed_batch_size)
        _corpus(settings, url, embedder, args.docs)
        ensure_ray(address=None, data_dir=Path(tmp) / "ray")
        from psycopg_pool import ConnectionPool

        pool = ConnectionPool(url, min_size=1, max_size=4, open=True)
        local, close_local = build_search_service(settings, pool, embedder, watch=False)
        remote_settings = Settings(**base, index={"shards": args.shards, "shard_servers": args.servers})  # type: ignore[arg-type]
        remote, close_remote = build_search_service(remote_settings, pool, embedder, watch=False)
        try:
            assert remote.shards is not None
            for service in (local, remote):  # warm both: first calls, caches, the actors' imports
                _block(service, acl, queries[:10], args.top_k)
            pairs: list[tuple[float, float]] = []
            all_local: list[float] = []
            all_remote: list[float] = []
            local_stages: dict[str, list[float]] = {}
            remote_stages: dict[str, list[float]] = {}
            for no in range(args.blocks):
                texts = [f"{q} zq{no}x{i}" for i, q in enumerate(queries)] if args.distinct else queries
                a = _block(local, acl, texts, args.top_k, local_stages)
                texts = [f"{q} zr{no}x{i}" for i, q in enumerate(queries)] if args.distinct else queries
                b = _block(remote, acl, texts, args.top_k, remote_stages)
                all_local += a
                all_remote += b
                pairs.append((statistics.median(a), statistics.median(b)))
            breakdown = _breakdown(remote.shards, remote, url, acl, queries, args.top_k)  # type: ignore[arg-type]
        finally:
            close_remote()
            close_local()
            pool.close()

    def p95(v: list[float]) -> float:
        return sorted(v)[int(0.95 * (len(v) - 1))]

    n = len(all_local)
    print(f"\n{args.blocks} block pairs x {args.queries} hybrid retrieves, {args.servers} shard servers:")
    print_table(
        ["serving", "retrieves", "p50 ms", "p95 ms"],
        [
            ["in-process", n, statistics.median(all_local), p95(all_local)],
            [f"{args.servers} shard servers", n, statistics.median(all_remote), p95(all_remote)],
        ],
    )
    diffs = sorted(b - a for a, b in pairs)
    print(
        f"fan-out overhead per request (block medians, paired): median {statistics.median(diffs):.2f} ms,"
        f" range {diffs[0]:.2f} to {diffs[-1]:.2f} ms"
    )
    names = sorted(set(local_stages) | set(remote_stages))
    print("\nstage p50 ms of the same retrieves :")
    print_table(
        ["stage", "in-process", f"{args.servers} shard servers"],
        [
            [
                name,
                statistics.median(local_stages[name]) if name in local_stages else "-",
                statistics.median(remote_stages[name]) if name in remote_stages else "-",
            ]
            for name in names
        ],
    )
    print("\nwhere it goes (the fan-out's servers, same queries, sequential):")
    print_table(["part", "p50 ms", "p95 ms"], breakdown)
    print(f"\n{load_line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

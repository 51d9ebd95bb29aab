"""Shard server recovery: the time from a SIGKILL of one shard server's worker process to full
answers again, under a query loop, with no operator action (issue 26).

Run: ``OPENBLAS_NUM_THREADS=1 HF_HUB_OFFLINE=1 python -m bench.shard_recovery --docs 300 --rounds 6``.

On a throwaway PostgreSQL: ``--docs`` Cranfield documents (the bundled samples where the shared
data is absent) ingested inline with the bundled model, one flat ``--shards``-shard version on
``live``, local Ray and ``--servers`` shard servers behind a ``ShardFanout``. A loop sends a hybrid
query to the fan-out every ``--interval-ms``; each round kills one server (in turn) with SIGKILL
and reports the time until the first full answer (not ``degraded``), the answers that were
degraded meanwhile (none may be an error: the bench stops if one raises), the slowest answer of
the round, and how long the fan-out had the server marked down (from the first failed call to
the readiness probe's answer); the rest is Ray noticing the death. The baseline is the full
answers' latency before the first kill, in the same run.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from authz.acl import AclFilter
from bench.common import print_table
from bench.ingest import (
    CRANFIELD,
    MODEL,
    READER,
    TENANT,
    cranfield_items,
    fresh_database,
    load_line,
    sample_items,
)
from catalog import changes as changes_repo
from catalog import indexes
from catalog import jobs as jobs_repo
from catalog.principals import ensure_tenant
from core.settings import Settings
from index.embedder import Embedder, load_embedder
from jobs.rebuild_job import rebuild
from jobs.shard_servers import ShardFanout, ShardQuery, start_shard_servers
from testkit.clusters import throwaway_cluster
from wiring import make_runner, rebuild_config
from wiring.search import shard_server_config

QUERIES = ("boundary layer", "heat transfer", "supersonic flow", "shock wave", "wing", "pressure")


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.shard_recovery", description=__doc__)
    p.add_argument("--docs", type=int, default=300)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--servers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--interval-ms", type=float, default=20.0, help="pause between queries")
    p.add_argument("--timeout-s", type=float, default=5.0, help="the fan-out timeout")
    return p.parse_args(argv)


def _corpus(settings: Settings, url: str, embedder: Embedder, n: int) -> None:
    items = cranfield_items(n) if CRANFIELD.exists() else sample_items(n)
    with psycopg.connect(url) as conn:
        ensure_tenant(conn, tenant_id=TENANT)
        job = jobs_repo.create_job(conn, tenant_id=TENANT, kind="ingest", items=items)
    if make_runner(settings, url, use_ray=False, embedder=embedder).run_job(job) != "succeeded":
        raise SystemExit("bench.shard_recovery: the ingest job failed")
    version = rebuild(url, rebuild_config(settings))
    with psycopg.connect(url) as conn, conn.transaction():
        indexes.swap_alias(conn, alias="live", version_id=version)


class Loop:
    """Queries the fan-out in a loop, timing each answer."""

    def __init__(self, fanout: ShardFanout, embedder: Embedder, url: str, interval_s: float) -> None:
        self.fanout, self.interval_s = fanout, interval_s
        self.conn = psycopg.connect(url, autocommit=True)
        self.vectors = [np.asarray(v, dtype=np.float32) for v in embedder.embed(list(QUERIES))]
        self.n = 0

    def one(self) -> tuple[bool, float]:
        """(full answer, seconds) of the next query."""
        i = self.n % len(QUERIES)
        self.n += 1
        query = ShardQuery(
            AclFilter(TENANT, frozenset({READER})),
            changes_repo.current_position(self.conn),
            self.vectors[i],
            QUERIES[i],
            10,
        )
        t = time.perf_counter()
        got = self.fanout.search(query)  # raises only on a bug: the bench then stops
        elapsed = time.perf_counter() - t
        time.sleep(self.interval_s)
        return not got.degraded, elapsed


def _round(loop: Loop, server: Any, i: int, deadline_s: float = 300.0) -> list[object]:
    import ray

    pid = ray.get(server.pid.remote())
    os.kill(pid, signal.SIGKILL)
    killed = time.perf_counter()
    degraded, slowest = 0, 0.0
    while time.perf_counter() - killed < deadline_s:
        full, elapsed = loop.one()
        slowest = max(slowest, elapsed)
        if full and degraded:
            break
        degraded += not full
    else:
        raise SystemExit(f"bench.shard_recovery: no full answer {deadline_s:.0f}s after the kill")
    recovered = time.perf_counter() - killed
    new_pid = ray.get(server.pid.remote())
    down = loop.fanout.health.recoveries[-1]
    return [f"server{i}", pid, new_pid, recovered, degraded, slowest * 1000, down]


def main(argv: Sequence[str] | None = None) -> int:
    import ray

    from jobs.ray_runtime import ensure_ray

    args = _args(argv)
    print(f"command: python -m bench.shard_recovery {' '.join(sys.argv[1:] if argv is None else argv)}")
    print(load_line())
    with throwaway_cluster("ragline-bench-recovery-") as (cluster, tmp):
        url = fresh_database(cluster, "recovery")
        settings = Settings(
            data_dir=tmp, database_url=url, log_level="WARNING", index={"shards": args.shards}
        )
        embedder = load_embedder(MODEL, batch_size=settings.ingest.embed_batch_size)
        _corpus(settings, url, embedder, args.docs)
        ensure_ray(address=None, data_dir=Path(tmp) / "ray")
        config = shard_server_config(settings, url, dim=embedder.dim)
        servers = start_shard_servers(config, n_servers=args.servers)
        fanout = ShardFanout(servers, timeout_s=args.timeout_s)
        loop = Loop(fanout, embedder, url, args.interval_ms / 1000)
        try:
            base = [loop.one() for _ in range(50)]
            if not all(full for full, _ in base):
                raise SystemExit("bench.shard_recovery: degraded answers before any kill")
            p50 = statistics.median(s for _, s in base) * 1000
            print(f"baseline: full answers p50 {p50:.1f} ms over {len(base)} queries\n")
            rows = [_round(loop, servers[r % args.servers], r % args.servers) for r in range(args.rounds)]
        finally:
            for server in servers:
                ray.kill(server)
            loop.conn.close()
    print_table(
        [
            "killed",
            "pid",
            "new pid",
            "to full answers s",
            "degraded answers",
            "slowest ms",
            "down in fan-out s",
        ],
        rows,
    )
    times = sorted(float(r[3]) for r in rows)  # type: ignore[arg-type]
    print(f"\nto full answers: median {statistics.median(times):.2f} s, max {times[-1]:.2f} s; {load_line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

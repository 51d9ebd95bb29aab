"""What observability costs a retrieve, and how per-key limits behave under load.

Run: ``python -m bench.observe --chunks 20000 --duration 15``.

1. In process: ``RetrieveObserver.observe`` (stage histograms, degraded counters, the
   freshness probe's check, and with the audit on, one event handed to the batch writer,
   which writes to PostgreSQL on its own thread) per call, audit off and on.
2. Through HTTP: the same corpus and index served twice, ``RAGLINE_AUDIT__RETRIEVES`` false
   then true, one open-loop rate each; p50/p95 and the ratio on/off.
3. The 429 curve: a server whose key limit is low (``--limit-rate``, burst as much), open
   loop at rising rates, then the lowest again: status counts and latency of what was admitted.
4. A ``/metrics`` sample from that server, after the load.

Uses ``bench.retrieve``'s synthetic catalog, index and server; the load generator shares the
machine with the server, so on 2 cores its CPU counts against the latencies.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from api.observe import ChangeVisibilityProbe, ObserveConfig, RetrieveAudit, RetrieveObserver
from authz.principals import Principal
from bench.common import print_table
from bench.load import LoadConfig, LoadResult, print_results, run_rates
from bench.retrieve import (
    live_catalog,
    retrieve_requests,
    server,
)
from catalog.db import open_pool
from catalog.serving import ChunkDetail
from core.settings import DEFAULT_EMBEDDING_MODEL
from jobs.audit_writer import AuditWriter, AuditWriterConfig
from retrieve.packing import PackedContext
from retrieve.service import ResultItem, RetrieveResult


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chunks", type=int, default=20_000)
    p.add_argument("--calls", type=int, default=20_000, help="in-process observe() calls per variant")
    p.add_argument("--rate", type=float, default=20.0, help="requests/s of the audit on/off runs")
    p.add_argument("--duration", type=float, default=15.0, help="measured seconds per rate")
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--limit-rate", type=float, default=10.0, help="the key's rate (and burst) in part 3")
    p.add_argument("--curve", default="5,10,20,40,80,5", help="rates of part 3, in order")
    p.add_argument("--curve-duration", type=float, default=8.0)
    return p.parse_args()


def _result(n: int = 8) -> RetrieveResult:
    items = [
        ResultItem(
            ChunkDetail(
                i, f"{i:064x}", i, f"doc-{i}", "t", "text " * 40, 0, 200, None, None, (), {}, None, None, None
            ),
            0.5,
            {"dense": 0.5},
        )
        for i in range(n)
    ]
    timings = {s: 1.0 for s in ("acl_filter", "lexical", "embed", "dense", "fusion", "fetch", "packing")}
    return RetrieveResult(
        items, PackedContext("", 0, (), False, ()), "v1", DEFAULT_EMBEDDING_MODEL, timings, []
    )


def _observe_cost(url: str, calls: int) -> list[list[object]]:
    """Microseconds per observe() call, audit off and on; the writer's totals prove the writes."""
    pool = open_pool(url, size=2)
    probe = ChangeVisibilityProbe(pool)
    result = _result()
    principal = Principal("bench", "user:bench", ("group:eng",), frozenset({"query"}), "key-1")
    info = RetrieveAudit(principal, None, "q", "hybrid", 8, {}, 10, 0.02, "rid")
    rows: list[list[object]] = []
    base = 0.0
    try:
        for audit_on in (False, True):
            observer = RetrieveObserver(ObserveConfig(tenant_labels=False, store_query_text=False), probe)
            writer = None
            if audit_on:
                writer = AuditWriter(
                    pool, AuditWriterConfig(batch_size=256, flush_s=0.2, queue_size=calls + 1)
                )
                writer.start()
                observer.audit = writer
            runs = []
            for _ in range(3):
                t = time.perf_counter()
                for _ in range(calls // 3):
                    observer.observe(result, info)
                runs.append((time.perf_counter() - t) / (calls // 3) * 1e6)
            per_call = statistics.median(runs)
            written = dropped = "-"
            if writer is not None:
                t = time.perf_counter()
                writer.close(timeout_s=120)
                written, dropped = str(writer.written), str(writer.dropped)
                written += f" ({time.perf_counter() - t:.1f}s to drain)"
            base = base or per_call
            rows.append(
                ["on" if audit_on else "off", f"{per_call:.1f}", f"{per_call - base:.1f}", written, dropped]
            )
    finally:
        pool.close()
    return rows


def _run(base: str, token: str, queries: list[str], configs: list[LoadConfig]) -> list[LoadResult]:
    request = retrieve_requests(queries, token, top_k=8, mode="hybrid", rerank=False)
    return asyncio.run(run_rates(base, request, configs))


def main() -> None:
    args = _args()
    curve = [float(r) for r in args.curve.split(",")]
    with (
        tempfile.TemporaryDirectory(prefix="ragline-bench-") as tmp_s,
        live_catalog(Path(tmp_s), args.chunks, queries=20_000) as (url, token, queries),
    ):
        tmp = Path(tmp_s)

        print(f"\n1. observe() per retrieve, {args.calls} calls, median of 3 runs")
        print_table(
            ["audit", "us/call", "added us", "events written", "dropped"], _observe_cost(url, args.calls)
        )

        load = LoadConfig(rate=args.rate, duration_s=args.duration, warmup_s=args.warmup, seed=3)
        http: dict[str, LoadResult] = {}
        for audit_on in ("false", "true"):
            env = {"RAGLINE_AUDIT__RETRIEVES": audit_on}
            with server(url, tmp, env_extra=env) as (base, _):
                http[audit_on] = _run(base, token, queries, [load])[0]
        off, on = http["false"], http["true"]
        print(f"\n2. HTTP, hybrid, {args.chunks:,} chunks, {args.rate:g} req/s, {args.duration:g}s measured")
        print_table(
            ["audit", "sent", "ok", "p50 ms", "p95 ms", "p99 ms"],
            [
                [k, r.sent, r.ok, f"{r.p50_ms:.1f}", f"{r.p95_ms:.1f}", f"{r.p99_ms:.1f}"]
                for k, r in (("off", off), ("on", on))
            ],
        )
        print(f"ratio on/off: p50 {on.p50_ms / off.p50_ms:.2f}, p95 {on.p95_ms / off.p95_ms:.2f}")

        limit = f"{args.limit_rate:g}"
        env = {
            "RAGLINE_LIMITS__RATE_PER_KEY": limit,
            "RAGLINE_LIMITS__BURST_PER_KEY": str(int(args.limit_rate)),
        }
        configs = [
            LoadConfig(rate=r, duration_s=args.curve_duration, warmup_s=2.0, timeout_s=5.0, seed=10 + i)
            for i, r in enumerate(curve)
        ]
        with server(url, tmp, env_extra=env) as (base, _):
            results = _run(base, token, queries, configs)
            sample = httpx.get(f"{base}/metrics", timeout=10).text
        print(f"\n3. one key limited to {limit} req/s (burst {int(args.limit_rate)}), rising open-loop rates")
        print_results(results)
        print("status counts per rate: " + "; ".join(f"{r.rate:g}/s {r.status_counts}" for r in results))
        print("\n4. /metrics sample (ragline_ series, first lines):")
        skip = ("_bucket", "_created")
        lines = [
            ln for ln in sample.splitlines() if ln.startswith("ragline_") and not any(s in ln for s in skip)
        ]
        print("\n".join(lines[:60]))


if __name__ == "__main__":
    main()

"""A noisy neighbour: tenant B's latency alone and while tenant A floods, in one run.

Run: ``python -m bench.noisy_neighbour --chunks 2000 --duration 10`` (add ``--a-clients 48``
for A as closed-loop clients, the shape of the issue's 48 threads).

One ``ragline serve`` (admission defaults) on a synthetic corpus (bench.retrieve). Every key
may send ``--key-rate`` requests/s (burst 4 s of it, 4 in flight). Phase 1: tenant B alone
at ``--b-rate`` (fixed gaps, below its limit). Phase 2: the same B schedule while tenant A,
another tenant, sends ``--flood`` times its own limit (Poisson). The goal of issue 26: B sees
no 503 and its p95 stays within 1.5x of B alone; A's excess is answered 429 by its own limits
before it takes a seat of the shared gate. B queries the corpus's tenant (real results); A's
key is in a tenant of its own, so its admitted requests do the embedding and the searches
but find nothing. Latency is measured from each request's scheduled send time.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from bench.common import print_table
from bench.http import LeanClient
from bench.load import LoadConfig, LoadResult, RequestSpec, _one, _Outcome, run_rate, summarise
from bench.retrieve import (
    live_catalog,
    retrieve_requests,
    server,
)

Request = Callable[[int], RequestSpec]


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Tenant isolation under a flood (see module docstring).")
    p.add_argument("--chunks", type=int, default=2000)
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds per phase")
    p.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds before each phase")
    p.add_argument("--key-rate", type=float, default=6.0, help="each key's rate limit, requests/s")
    p.add_argument("--b-rate", type=float, default=5.0, help="tenant B's requests/s")
    p.add_argument("--flood", type=float, default=10.0, help="tenant A's rate, in multiples of its limit")
    p.add_argument(
        "--a-clients", type=int, default=0, help="A as this many closed-loop clients instead (no pause)"
    )
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def _flood_key(url: str) -> str:
    from authz.api_keys import create_key

    with psycopg.connect(url) as conn:
        return create_key(conn, tenant_id="noisy", roles=["query"], principal_id="user:noisy").token


async def _phases(
    base: str, b_req: Request, a_req: Request, args: argparse.Namespace
) -> tuple[LoadResult, LoadResult, LoadResult]:
    b_config = LoadConfig(
        rate=args.b_rate, duration_s=args.duration, warmup_s=args.warmup, timeout_s=30.0, arrival="fixed"
    )
    a_config = LoadConfig(
        rate=args.key_rate * args.flood,
        duration_s=args.duration,
        warmup_s=args.warmup,
        timeout_s=30.0,
        arrival="poisson",
        seed=args.seed,
    )
    async with (
        LeanClient(base, max_connections=64, keepalive_expiry=2.0) as b_client,
        LeanClient(base, max_connections=512, keepalive_expiry=2.0) as a_client,
    ):
        alone = await run_rate(b_client, b_req, b_config)
        await asyncio.sleep(2.0)
        flood = _closed_loop(a_client, a_req, a_config, args.a_clients) if args.a_clients else None
        b_flooded, a_flood = await asyncio.gather(
            run_rate(b_client, b_req, b_config), flood or run_rate(a_client, a_req, a_config)
        )
    return alone, b_flooded, a_flood


async def _closed_loop(client: LeanClient, request: Request, config: LoadConfig, clients: int) -> LoadResult:
    """``clients`` loops sending A's next request as soon as the last is answered."""
    outcomes: list[_Outcome] = []
    start = time.perf_counter()
    stop = start + config.warmup_s + config.duration_s

    async def loop() -> None:
        while (sent := time.perf_counter()) < stop:
            outcomes.append(
                await _one(client, request(0), sent, sent - start >= config.warmup_s, config.timeout_s)
            )

    await asyncio.gather(*(loop() for _ in range(clients)))
    result = summarise([o for o in outcomes if o.measured], config)
    return dataclasses.replace(result, rate=result.sent / config.duration_s)


def _row(name: str, r: LoadResult, alone: LoadResult | None) -> list[object]:
    ratio = f"{r.p95_ms / alone.p95_ms:.2f}" if alone is not None and alone.p95_ms > 0 else ""
    return [
        name,
        f"{r.rate:g}",
        r.sent,
        r.status_counts.get("200", 0),
        r.status_counts.get("429", 0),
        r.status_counts.get("503", 0),
        r.sent
        - r.status_counts.get("200", 0)
        - r.status_counts.get("429", 0)
        - r.status_counts.get("503", 0),
        f"{r.p50_ms:.0f}" if not math.isnan(r.p50_ms) else "n/a",
        f"{r.p95_ms:.0f}" if not math.isnan(r.p95_ms) else "n/a",
        ratio,
    ]


def main() -> None:
    args = _args()
    burst = max(1, round(4 * args.key_rate))
    env = {
        "RAGLINE_LIMITS__RATE_PER_KEY": str(args.key_rate),
        "RAGLINE_LIMITS__BURST_PER_KEY": str(burst),
        "RAGLINE_LIMITS__CONCURRENCY_PER_KEY": "4",
        "RAGLINE_AUDIT__RETRIEVES": "false",
    }
    with tempfile.TemporaryDirectory(prefix="ragline-noisy-") as name:
        tmp = Path(name)
        total = int((args.b_rate * 2 + args.key_rate * args.flood) * (args.duration + args.warmup)) + 100
        with live_catalog(tmp, args.chunks, queries=total, seed=args.seed) as (url, b_token, queries):
            a_token = _flood_key(url)
            b_req = retrieve_requests(queries, b_token, top_k=8, mode="hybrid")
            a_req = retrieve_requests(queries[::-1], a_token, top_k=8, mode="hybrid")
            with server(url, tmp, env_extra=env) as (base, _pid):
                alone, b_flooded, a_flood = asyncio.run(_phases(base, b_req, a_req, args))
    print(
        f"\nhybrid retrieve, {args.chunks:,} chunks, {args.warmup:g}s warm-up + {args.duration:g}s measured"
        f" per phase, {os.cpu_count()} CPUs, admission defaults; every key {args.key_rate:g} req/s"
        f" (burst {burst}, 4 in flight); A floods "
        + (
            f"with {args.a_clients} closed-loop clients"
            if args.a_clients
            else f"at {args.flood:g}x its limit"
        )
    )
    headers = [
        "tenant",
        "rate/s",
        "sent",
        "200",
        "429",
        "503",
        "other",
        "200 p50 ms",
        "200 p95 ms",
        "p95 / B alone",
    ]
    print_table(
        headers,
        [_row("B alone", alone, None), _row("B with A", b_flooded, alone), _row("A flood", a_flood, None)],
    )
    print(f"B p95 with A flooding / B alone: {b_flooded.p95_ms / alone.p95_ms:.2f}")


if __name__ == "__main__":
    main()

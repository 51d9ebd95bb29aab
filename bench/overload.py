"""Open-loop bursts past capacity, with admission control off and on, in one run.

Run: ``python -m bench.overload --chunks 5000 --rates 20,50,100 --duration 8``.

Without admission control every request is queued and answered, later and later (issue 17:
at 100 req/s a p95 of 15.6 s); with it the server sheds what it cannot serve in time (503
``overloaded`` with Retry-After) and the requests it accepts keep a normal latency. Both
servers run one after the other on the same catalog, index, queries and arrival schedules
(from bench.retrieve: synthetic chunks with real BM25 postings, queries embedded by the real
model). "off" is the server as it was: ``RAGLINE_API__MAX_INFLIGHT=0`` and a 10-minute
request deadline; "on" has the defaults (gate and 10 s deadline). Per-key limits are lifted
for both so only the server protects itself. Client timeouts count in "other". The table
shows the accepted requests' latency (measured from their scheduled send time, so the
generator's own delay counts), the fraction shed and the p95 ratio of "on" to "off".
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import tempfile
from pathlib import Path

from bench.common import print_table
from bench.load import LoadConfig, LoadResult, run_rates
from bench.retrieve import (
    live_catalog,
    retrieve_requests,
    server,
)


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Load shedding past capacity (see module docstring).")
    p.add_argument("--chunks", type=int, default=5000)
    p.add_argument("--rates", default="20,50,100", help="comma-separated requests per second")
    p.add_argument("--duration", type=float, default=8.0, help="measured seconds per rate")
    p.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds before each rate")
    p.add_argument("--timeout", type=float, default=30.0, help="client timeout (long: see the 'off' tail)")
    p.add_argument("--pause", type=float, default=5.0, help="idle seconds between rates (queues drain)")
    p.add_argument("--max-inflight", type=int, help="admission 'on' setting (default: the server's)")
    p.add_argument("--max-queued", type=int, help="admission 'on' setting (default: the server's)")
    p.add_argument("--queue-timeout-ms", type=int, help="admission 'on' setting (default: the server's)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def _measure(
    url: str, data_dir: Path, env: dict[str, str], queries: list[str], token: str, args: argparse.Namespace
) -> list[LoadResult]:
    rates = [float(r) for r in args.rates.split(",")]
    request = retrieve_requests(queries, token, top_k=8, mode="hybrid")

    configs = [
        LoadConfig(
            rate=r,
            duration_s=args.duration,
            warmup_s=args.warmup,
            timeout_s=args.timeout,
            arrival="poisson",
            seed=args.seed + i,
        )
        for i, r in enumerate(rates)
    ]
    with server(url, data_dir, env_extra=env) as (base, _pid):
        return asyncio.run(run_rates(base, request, configs, pause_s=args.pause))


def _row(mode: str, r: LoadResult, off: LoadResult | None) -> list[object]:
    shed = r.status_counts.get("503", 0)
    other = r.sent - r.ok - shed
    ratio = f"{r.p95_ms / off.p95_ms:.2f}" if off is not None and off.p95_ms > 0 else ""
    return [
        f"{r.rate:g}",
        mode,
        r.sent,
        r.ok,
        f"{100 * shed / max(1, r.sent):.1f}%",
        other,
        f"{r.p50_ms:.0f}" if not math.isnan(r.p50_ms) else "n/a",
        f"{r.p95_ms:.0f}" if not math.isnan(r.p95_ms) else "n/a",
        f"{r.throughput:.1f}",
        ratio,
    ]


def main() -> None:
    args = _args()
    lifted = {
        "RAGLINE_LIMITS__RATE_PER_KEY": "100000",
        "RAGLINE_LIMITS__BURST_PER_KEY": "100000",
        "RAGLINE_LIMITS__CONCURRENCY_PER_KEY": "100000",
        "RAGLINE_AUDIT__RETRIEVES": "false",
    }
    on = dict(lifted)
    for name in ("max_inflight", "max_queued", "queue_timeout_ms"):
        if getattr(args, name) is not None:
            on[f"RAGLINE_API__{name.upper()}"] = str(getattr(args, name))
    with tempfile.TemporaryDirectory(prefix="ragline-overload-") as name:
        tmp = Path(name)
        rates = [float(r) for r in args.rates.split(",")]
        total = int(sum(r * (args.duration + args.warmup) for r in rates) * 1.5) + 100
        with live_catalog(tmp, args.chunks, queries=total, seed=args.seed) as (url, token, queries):
            # "off" is the server before issue 17: no gate and no request deadline to speak of
            # (10 minutes), so every request queues until it is answered.
            off_env = {
                **lifted,
                "RAGLINE_API__MAX_INFLIGHT": "0",
                "RAGLINE_API__REQUEST_TIMEOUT_MS": "600000",
            }
            off_results = _measure(url, tmp, off_env, queries, token, args)
            on_results = _measure(url, tmp, on, queries, token, args)
    settings = ", ".join(f"{k[13:].lower()} {v}" for k, v in on.items() if k.startswith("RAGLINE_API__"))
    print(
        f"\nhybrid retrieve, {args.chunks:,} chunks, poisson arrivals, {args.warmup:g}s warm-up +"
        f" {args.duration:g}s measured per rate, {os.cpu_count()} CPUs; admission on ="
        f" {settings or 'the defaults'}"
    )
    headers = [
        "rate/s", "admission", "sent", "200", "shed 503", "other", "200 p50 ms", "200 p95 ms", "200/s",
        "p95 on/off",
    ]  # fmt: skip
    rows: list[list[object]] = []
    for off, on_r in zip(off_results, on_results, strict=True):
        rows.append(_row("off", off, None))
        rows.append(_row("on", on_r, off))
    print_table(headers, rows)
    odd: dict[str, int] = {}
    for r in off_results + on_results:
        for k, v in r.status_counts.items():
            if k not in ("200", "503"):
                odd[k] = odd.get(k, 0) + v
    if odd:
        print(f"other outcomes, all rates: {odd}")


if __name__ == "__main__":
    main()

"""An open-loop HTTP load generator: requests arrive on a schedule, whatever the server does.

A closed loop (N workers, each waiting for its response before sending the next) slows down
with the server and so hides queueing: it measures the server at whatever rate it can take,
not at the rate users would arrive (the "coordinated omission" problem, Tene 2013). Here
arrivals follow a fixed schedule (Poisson or evenly spaced) drawn before the run, every
request is its own task, and latency is measured from the *scheduled* send time, so a
generator that falls behind still charges the delay to the result.

Use ``run_rate`` / ``run_rates`` from other scripts, and ``print_results`` for the table.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from bench.common import print_table
from bench.http import HttpError, LeanClient, Reply

Arrival = Literal["poisson", "fixed"]


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One HTTP request to send; ``json`` is the body, if any."""

    method: str
    path: str
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LoadConfig:
    """How to drive one rate.

    Attributes:
        rate: mean arrivals per second.
        duration_s: measured period, after the warm-up.
        warmup_s: period before it whose requests are sent but not counted.
        timeout_s: a request still unanswered this long after its scheduled time is a timeout.
        latency_target_ms: the latency a request must meet to count toward goodput.
        arrival: "poisson" (exponential gaps, like independent users) or "fixed" (even gaps).
        seed: seed of the arrival schedule.
    """

    rate: float
    duration_s: float = 20.0
    warmup_s: float = 5.0
    timeout_s: float = 5.0
    latency_target_ms: float = 50.0
    arrival: Arrival = "poisson"
    seed: int = 0


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What one rate measured; latencies cover successful requests of the measured period.

    ``goodput`` is the fraction of measured requests that succeeded within the latency
    target; ``throughput`` is successful responses per second of the measured period;
    ``max_lag_ms`` is how late the generator itself dispatched its worst request.
    """

    rate: float
    duration_s: float
    sent: int
    ok: int
    errors: int
    timeouts: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    throughput: float
    goodput: float
    latency_target_ms: float
    max_lag_ms: float
    status_counts: dict[str, int]
    server_p50_ms: dict[str, float] = field(default_factory=dict)
    server_p95_ms: dict[str, float] = field(default_factory=dict)
    # Each counter's increase over the rate (warm-up included) per request sent in it.
    per_request: dict[str, float] = field(default_factory=dict)
    # The successful requests' latencies (for estimates pooled over runs: bench.tracing).
    latencies_ms: list[float] = field(default_factory=list, repr=False)


@dataclass(slots=True)
class _Outcome:
    measured: bool
    kind: str  # "ok", "error" or "timeout"
    latency_ms: float
    lag_ms: float
    status: str
    server_ms: Mapping[str, float] = field(default_factory=dict)


# Reads the server's own timings (stage -> ms) out of a successful response.
ServerTimings = Callable[[Reply], Mapping[str, float]]


def arrival_offsets(config: LoadConfig) -> np.ndarray:
    """Send times (seconds from start) of every request of the warm-up and measured period."""
    total = config.warmup_s + config.duration_s
    if config.rate <= 0 or total <= 0:
        return np.zeros(0)
    if config.arrival == "fixed":
        return np.arange(0.0, total, 1.0 / config.rate)
    rng = np.random.default_rng(config.seed)
    # Draw generously, then cut: the count of a Poisson process over `total` is itself random.
    n = int(config.rate * total + 10 * math.sqrt(config.rate * total) + 10)
    times = np.cumsum(rng.exponential(1.0 / config.rate, size=n))
    return times[times < total]


async def _one(
    client: LeanClient,
    spec: RequestSpec,
    scheduled: float,
    measured: bool,
    timeout_s: float,
    server_timings: ServerTimings | None = None,
) -> _Outcome:
    lag_ms = (time.perf_counter() - scheduled) * 1000
    try:
        resp = await asyncio.wait_for(
            client.request(spec.method, spec.path, json=spec.json, headers=spec.headers),
            timeout=max(timeout_s - lag_ms / 1000, 0.001),
        )
    except TimeoutError:
        return _Outcome(measured, "timeout", math.nan, lag_ms, "timeout")
    except HttpError as exc:
        return _Outcome(measured, "error", math.nan, lag_ms, type(exc).__name__)
    latency_ms = (time.perf_counter() - scheduled) * 1000
    kind = "ok" if resp.is_success else "error"
    server = server_timings(resp) if server_timings is not None and resp.is_success else {}
    return _Outcome(measured, kind, latency_ms, lag_ms, str(resp.status_code), server)


async def run_rate(
    client: LeanClient,
    next_request: Callable[[int], RequestSpec],
    config: LoadConfig,
    server_timings: ServerTimings | None = None,
) -> LoadResult:
    """Drive one arrival rate against ``client`` and summarise the measured period.

    Args:
        client: a :class:`bench.http.LeanClient` with a connection limit above the expected
            concurrency (queueing in the client pool counts as latency).
        next_request: builds the i-th request (query texts, keys...).
        config: rate, durations, timeout, latency target and arrival process.
        server_timings: reads the server's stage timings from a response, so the result can
            tell time spent in the stages from time spent queueing around them.

    Returns:
        The counts and latency percentiles of the requests scheduled after the warm-up.
    """
    offsets = arrival_offsets(config)
    start = time.perf_counter() + 0.05
    tasks: list[asyncio.Task[_Outcome]] = []
    for i, offset in enumerate(offsets):
        scheduled = start + float(offset)
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        # Never await the response here: that would turn the open loop into a closed one.
        measured = offset >= config.warmup_s
        tasks.append(
            asyncio.create_task(
                _one(client, next_request(i), scheduled, measured, config.timeout_s, server_timings)
            )
        )
    outcomes = await asyncio.gather(*tasks)
    return summarise([o for o in outcomes if o.measured], config)


def summarise(outcomes: Sequence[_Outcome], config: LoadConfig) -> LoadResult:
    """Counts, percentiles, throughput and goodput of the measured requests."""
    ok = [o.latency_ms for o in outcomes if o.kind == "ok"]
    lat = np.asarray(ok, dtype=np.float64)
    pct = np.percentile(lat, [50, 95, 99]) if len(lat) else np.full(3, math.nan)
    within = int(np.count_nonzero(lat <= config.latency_target_ms))
    statuses: dict[str, int] = {}
    stages: dict[str, list[float]] = {}
    for o in outcomes:
        statuses[o.status] = statuses.get(o.status, 0) + 1
        for stage, ms in o.server_ms.items():
            stages.setdefault(stage, []).append(ms)
    return LoadResult(
        rate=config.rate,
        duration_s=config.duration_s,
        sent=len(outcomes),
        ok=len(ok),
        errors=sum(o.kind == "error" for o in outcomes),
        timeouts=sum(o.kind == "timeout" for o in outcomes),
        p50_ms=float(pct[0]),
        p95_ms=float(pct[1]),
        p99_ms=float(pct[2]),
        mean_ms=float(lat.mean()) if len(lat) else math.nan,
        throughput=len(ok) / config.duration_s if config.duration_s > 0 else 0.0,
        goodput=within / len(outcomes) if outcomes else 0.0,
        latency_target_ms=config.latency_target_ms,
        max_lag_ms=max((o.lag_ms for o in outcomes), default=0.0),
        status_counts=statuses,
        server_p50_ms={k: float(np.percentile(v, 50)) for k, v in stages.items()},
        server_p95_ms={k: float(np.percentile(v, 95)) for k, v in stages.items()},
        latencies_ms=ok,
    )


async def run_rates(
    base_url: str,
    next_request: Callable[[int], RequestSpec],
    configs: Sequence[LoadConfig],
    *,
    max_connections: int = 512,
    pause_s: float = 2.0,
    server_timings: ServerTimings | None = None,
    counters: Mapping[str, Callable[[], float]] | None = None,
) -> list[LoadResult]:
    """Run each config in turn on one client, pausing between rates so queues drain.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8000``.
        next_request: builds the i-th request of a rate.
        configs: one per rate, usually in increasing rate order (the first is the baseline).
        max_connections: client connection limit; keep it above rate x worst latency.
        pause_s: idle time between rates.
        server_timings: see :func:`run_rate`.
        counters: monotonic readings (e.g. a process's CPU ms) taken before and after each
            rate; their increase per request sent lands in ``LoadResult.per_request``.

    Returns:
        One result per config, in order.
    """
    # Idle connections expire before uvicorn's 5 s keep-alive does: reusing one the server is
    # closing at that moment fails with an error that is the client's fault, not the server's.
    results = []
    async with LeanClient(base_url, max_connections=max_connections, keepalive_expiry=2.0) as client:
        for i, config in enumerate(configs):
            if i:
                await asyncio.sleep(pause_s)
            before = {name: read() for name, read in (counters or {}).items()}
            result = await run_rate(client, next_request, config, server_timings)
            sent = len(arrival_offsets(config))
            result.per_request.update(
                {name: (read() - before[name]) / max(1, sent) for name, read in (counters or {}).items()}
            )
            results.append(result)
    return results


def print_results(results: Sequence[LoadResult]) -> None:
    """A table of the results; ``x p95`` is each p95 over the first (lowest-rate) result's."""
    if not results:
        return
    base = results[0].p95_ms
    target = results[0].latency_target_ms
    headers = [
        "rate/s", "sent", "ok", "errors", "timeouts", "p50 ms", "p95 ms", "p99 ms",
        "ok/s", f"goodput@{target:g}ms", "x p95", "max lag ms",
    ]  # fmt: skip
    rows = [
        [
            f"{r.rate:g}",
            r.sent,
            r.ok,
            r.errors,
            r.timeouts,
            round(r.p50_ms, 1),
            round(r.p95_ms, 1),
            round(r.p99_ms, 1),
            round(r.throughput, 2),
            f"{100 * r.goodput:.1f}%",
            f"{r.p95_ms / base:.2f}" if base > 0 and not math.isnan(base) else "n/a",
            round(r.max_lag_ms, 1),
        ]
        for r in results
    ]
    print_table(headers, rows)
    bad = {k: v for r in results for k, v in r.status_counts.items() if k != "200"}
    if bad:
        print(f"non-200 outcomes: {bad}")
    counted = list(dict.fromkeys(k for r in results for k in r.per_request))
    if counted:
        print("\nper request sent (warm-up included):")
        print_table(
            ["rate/s", *counted],
            [[f"{r.rate:g}"] + [f"{r.per_request.get(c, math.nan):.1f}" for c in counted] for r in results],
        )
    stages = list(dict.fromkeys(k for r in results for k in r.server_p50_ms))
    if stages:
        print("\nserver-reported timings, p50 / p95 ms per stage:")
        print_table(
            ["rate/s", *stages],
            [
                [f"{r.rate:g}"]
                + [
                    f"{r.server_p50_ms.get(s, math.nan):.1f} / {r.server_p95_ms.get(s, math.nan):.1f}"
                    for s in stages
                ]
                for r in results
            ],
        )

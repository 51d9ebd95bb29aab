"""What OpenTelemetry tracing costs a retrieve over HTTP: the same corpus and index served
with tracing off, then on (OTLP/HTTP to a local sink that accepts every export), one
open-loop rate each; p50/p95 and the ratio on/off, and the exports the sink received (the
proof the spans left the server).

Run: ``python -m bench.tracing --chunks 20000 --rate 20 --duration 15``; with ``--paired 80``,
instead, one traced server per export variant (in-process, child process) and the server's CPU
per request of sampled against unsampled blocks of sequential requests, paired within the
process (``--pairs``). With ``--side-by-side``, each round runs the off and the on server at once
on the same arrival schedule, and reports the geometric mean of the per-round ratios with a
bootstrap interval over rounds.

Uses ``bench.retrieve``'s synthetic catalog, index and server; the load generator and the sink
share the machine with the server, so their CPU counts against the latencies.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import marshal
import multiprocessing as mp
import os
import random
import statistics
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from bench.common import print_table
from bench.load import LoadConfig, LoadResult, run_rates
from bench.retrieve import (
    _cpu_seconds,
    live_catalog,
    retrieve_requests,
    server,
)


class _Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP trace endpoint that keeps nothing: counts exports and their bytes (in its
    own process, so it does not share the load generator's interpreter)."""

    exports: Any = None  # multiprocessing.Value, shared with the bench process
    received: Any = None

    def do_POST(self) -> None:  # noqa: N802 (the http.server hook's name)
        size = int(self.headers.get("content-length", "0") or 0)
        self.rfile.read(size)
        with _Sink.exports.get_lock():
            _Sink.exports.value += 1
            _Sink.received.value += size
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return


def _serve(port: Any, exports: Any, received: Any) -> None:
    _Sink.exports, _Sink.received = exports, received
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    port.value = sink.server_address[1]
    sink.serve_forever()


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chunks", type=int, default=20_000)
    p.add_argument("--rate", type=float, default=20.0, help="requests/s of each run")
    p.add_argument("--duration", type=float, default=15.0, help="measured seconds per run")
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument(
        "--rounds", type=int, default=1, help="off/on pairs, alternating (the order's drift cancels)"
    )
    p.add_argument(
        "--on-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an extra variable of the traced server (e.g. OTEL_BSP_MAX_EXPORT_BATCH_SIZE=64), repeatable",
    )
    p.add_argument(
        "--paired",
        type=int,
        default=0,
        metavar="BLOCK",
        help="instead of the open loop: one traced server per export variant (in-process, child), "
        "blocks of BLOCK sequential retrieves alternating sampled and unsampled (the traceparent "
        "flag); the server's CPU per request, paired per block (immune to start-to-start drift)",
    )
    p.add_argument("--pairs", type=int, default=8, help="sampled/unsampled block pairs of --paired")
    p.add_argument(
        "--side-by-side",
        action="store_true",
        help="each round runs the off and the on server at once, each at --rate on the same "
        "arrival schedule and queries: both see the same machine (other work, thermal state) "
        "at the same moments, and rounds give fresh servers (start-to-start drift)",
    )
    p.add_argument(
        "--encode",
        type=int,
        default=0,
        metavar="REQUESTS",
        help="instead: the exporter child's CPU per span, encoding REQUESTS retrieve traces' rows "
        "(the spans of one traced hybrid retrieve) the SDK's way (rebuilt as ReadableSpans, "
        "encode_spans) and straight to protobuf (core/span_export._encode_rows); no server",
    )
    return p.parse_args()


def retrieve_trace_rows(rng: random.Random) -> list[tuple[Any, ...]]:
    """The rows of one traced hybrid retrieve, as the server queues them (core/span_export):
    the server span (api/middleware.py's attributes), ``retrieve``, its eight stage spans (the
    README's names), the query embedder's batch and two statement spans (the psycopg
    instrumentation's attributes); names, kinds, scopes and keys as served, values stand-ins."""
    from core.span_export import _make_row, finished_row

    trace_id, now = rng.getrandbits(128), time.time_ns()
    sampled = TraceFlags(TraceFlags.SAMPLED)

    def new_span() -> SpanContext:
        return SpanContext(trace_id, rng.getrandbits(64), False, sampled)

    server, parent = new_span(), new_span()  # parent: the retrieve span, the stages' parent
    ragline = ("ragline", None, None)
    unset = Status(StatusCode.UNSET)

    def row(name: str, ctx: SpanContext, up: SpanContext | None, kind: SpanKind, ms: float,
            attrs: dict[str, Any], scope: tuple[str, str | None, str | None]) -> tuple[Any, ...]:  # fmt: skip
        return _make_row(name, ctx, up, kind, now, now + int(ms * 1e6), attrs, unset, (), (), scope)

    http = {"http.request.method": "POST", "http.response.status_code": 200, "http.route": "/v1/retrieve"}
    search = {"ragline.mode": "hybrid", "ragline.top_k": 8, "ragline.results": 8, "ragline.index_version": 3}
    rows = [
        row("POST /v1/retrieve", server, None, SpanKind.SERVER, 30, http, ragline),
        row("retrieve", parent, server, SpanKind.INTERNAL, 28, search, ragline),
    ]
    for stage in ("acl_filter", "embed", "lexical", "dense", "fusion", "fetch", "rerank", "packing"):
        attrs = {"ragline.stage": stage}
        rows.append(
            finished_row(f"retrieve.{stage}", parent, rng.getrandbits(64), now, now + 2_000_000, attrs)
        )
    batch = {"ragline.batch.items": 1, "ragline.batch.requests": 1}
    rows.append(
        finished_row("query_embedder.batch", parent, rng.getrandbits(64), now, now + 5_000_000, batch)
    )
    statement = (
        "SELECT c.id, c.document_id, c.ordinal, c.title, c.section_path, c.page FROM chunks c "
        "JOIN documents d ON d.id = c.document_id WHERE c.id = ANY(%s) AND d.tenant_id = %s"
    )
    db = {"db.system": "postgresql", "db.name": "ragline", "db.statement": statement,
          "net.peer.name": "127.0.0.1", "net.peer.port": 5432}  # fmt: skip
    psycopg = ("opentelemetry.instrumentation.psycopg", "0.66b1", None)
    for _ in range(2):
        rows.append(row("SELECT", new_span(), parent, SpanKind.CLIENT, 1, dict(db), psycopg))
    return rows


def _encode(args: argparse.Namespace) -> None:
    """CPU per span of the child's two ways to encode a batch, best of 7 repetitions each, from
    the marshalled rows the pipe carries (``marshal.loads`` included in both)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource

    from core.span_export import _encode_rows, _span

    rng = random.Random(0)
    resource = Resource.create({"service.name": "ragline"})
    rows = [row for _ in range(args.encode) for row in retrieve_trace_rows(rng)]
    wire = [marshal.dumps(row) for row in rows]
    per_request = len(rows) / args.encode
    batches = [wire[i : i + 512] for i in range(0, len(wire), 512)]  # OTEL_BSP_MAX_EXPORT_BATCH_SIZE

    def sdk() -> int:
        return sum(
            len(encode_spans([_span(marshal.loads(r), resource) for r in b]).SerializePartialToString())
            for b in batches
        )

    def direct() -> int:
        return sum(len(_encode_rows([marshal.loads(r) for r in b], resource)) for b in batches)

    assert sdk() == direct(), "the two encodings differ in size"
    got = {}
    for name, fn in (("SDK: ReadableSpan + encode_spans", sdk), ("direct: _encode_rows", direct)):
        best = float("inf")
        for _ in range(7):
            started = time.process_time()
            size = fn()
            best = min(best, time.process_time() - started)
        got[name] = best * 1e6 / len(rows)
    print(
        f"\nexporter child, {args.encode:,} retrieve traces ({per_request:g} spans each,"
        f" {size // args.encode:,} bytes each), batches of 512, CPU best of 7"
    )
    base = got["SDK: ReadableSpan + encode_spans"]
    print_table(
        ["encoding", "µs/span", "ms per traced request", "vs SDK"],
        [[k, f"{v:.1f}", f"{v * per_request / 1000:.3f}", f"{v / base:.2f}x"] for k, v in got.items()],
    )


def _send(client: httpx.Client, query: str, sampled: bool) -> float:
    """One retrieve as a new trace, sampled or not by its ``traceparent`` flag; its latency in ms."""
    traceparent = f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-{'01' if sampled else '00'}"
    body = {"query": query, "top_k": 8, "mode": "hybrid", "rerank": False}
    started = time.perf_counter()
    client.post("/v1/retrieve", json=body, headers={"traceparent": traceparent}).raise_for_status()
    return (time.perf_counter() - started) * 1000


def _paired(
    args: argparse.Namespace, url: str, token: str, queries: list[str], tmp: Path, endpoint: str
) -> None:
    """Per export variant, one server; sampled and unsampled blocks alternate (the order flips
    each pair), and each block's server CPU is read from the process's own counters after a
    pause that lets its spans leave. An unsampled request makes no recording span, as with
    tracing off, so a pair's difference is what tracing costs a request in that process."""
    common = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "500"}
    variants = {
        "in-process": {**common, "RAGLINE_TRACING__EXPORT_PROCESS": "false"},
        "child": common,
    }
    rows = []
    for name, env in variants.items():
        with server(url, tmp, env_extra=env) as (base, pid):
            client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30)
            sequence = iter(range(10**9))

            def send(sampled: bool, client: httpx.Client = client, sequence: Any = sequence) -> float:
                return _send(client, queries[next(sequence) % len(queries)], sampled)

            for i in range(100):  # warm-up, both kinds
                send(i % 2 == 0)
            cpu: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
            latency: dict[bool, list[float]] = {True: [], False: []}
            for pair in range(args.pairs):
                for sampled in (True, False) if pair % 2 == 0 else (False, True):
                    own0, all0 = _cpu_seconds(pid, children=False), _cpu_seconds(pid)
                    latency[sampled] += [send(sampled) for _ in range(args.paired)]
                    time.sleep(0.6)  # the block's last batch leaves (schedule delay 0.5 s)
                    own1, all1 = _cpu_seconds(pid, children=False), _cpu_seconds(pid)
                    cpu[sampled].append(
                        (
                            (own1 - own0) * 1000 / args.paired,
                            ((all1 - all0) - (own1 - own0)) * 1000 / args.paired,
                        )
                    )
            client.close()
            diffs = [on[0] - off[0] for on, off in zip(cpu[True], cpu[False], strict=True)]
            med = statistics.median
            rows.append(
                [
                    name,
                    f"{med(c[0] for c in cpu[True]):.2f} / {med(c[0] for c in cpu[False]):.2f}",
                    f"{med(diffs):+.2f} ({min(diffs):+.2f} to {max(diffs):+.2f})",
                    f"{med(c[1] for c in cpu[True]):.2f}",
                    f"{med(latency[True]):.1f} / {med(latency[False]):.1f}",
                ]
            )
    print(
        f"\nsequential retrieves, hybrid, {args.chunks:,} chunks,"
        f" {args.pairs} pairs of {args.paired}-request blocks"
    )
    print_table(
        ["export", "server CPU ms/req sampled / unsampled", "paired diff, median (range)", "child CPU ms/req",
         "p50 ms sampled / unsampled"],
        rows,
    )  # fmt: skip


async def _side_by_side_round(
    bases: dict[str, str], pids: dict[str, int], token: str, queries: list[str], load: LoadConfig
) -> dict[str, LoadResult]:
    """One rate against every server at once: the same arrivals (seed) and query sequence each."""

    async def one(name: str) -> LoadResult:
        request = retrieve_requests(queries, token, top_k=8, mode="hybrid", rerank=False)
        pid = pids[name]
        counters = {
            "server": lambda: _cpu_seconds(pid, children=False) * 1000,
            "children": lambda: (_cpu_seconds(pid) - _cpu_seconds(pid, children=False)) * 1000,
        }
        return (await run_rates(bases[name], request, [load], counters=counters))[0]

    got = await asyncio.gather(*(one(name) for name in bases))
    return dict(zip(bases, got, strict=True))


def _geometric_interval(ratios: list[float], seed: int = 0) -> tuple[float, float, float]:
    """The geometric mean of per-round ratios and its 95% percentile bootstrap interval
    (rounds resampled, 2,000 times)."""
    logs = np.log(np.asarray(ratios))
    rng = np.random.default_rng(seed)
    means = logs[rng.integers(0, len(logs), size=(2000, len(logs)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(np.exp(logs.mean())), float(np.exp(lo)), float(np.exp(hi))


def _pooled_interval(
    off: list[list[float]], on: list[list[float]], q: float, seed: int = 0
) -> tuple[float, float, float]:
    """The ratio of the q-th percentiles of every round's latencies pooled (on / off), and its
    95% interval from resampling rounds (paired: a drawn round brings both its runs), 2,000
    times: a pooled p95 rests on every round's tail, where one round's rests on its top 5%."""

    def ratio(rounds: np.ndarray) -> float:
        a = np.concatenate([on[i] for i in rounds])
        b = np.concatenate([off[i] for i in rounds])
        return float(np.percentile(a, q) / np.percentile(b, q))

    rng = np.random.default_rng(seed)
    n = len(off)
    draws = [ratio(rng.integers(0, n, size=n)) for _ in range(2000)]
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return ratio(np.arange(n)), float(lo), float(hi)


def _print_pooled(off: list[list[float]], on: list[list[float]]) -> None:
    for q in (50, 95, 99):
        mean, lo, hi = _pooled_interval(off, on, q)
        print(
            f"p{q} pooled over rounds: off {np.percentile(np.concatenate(off), q):.1f} ms,"
            f" on {np.percentile(np.concatenate(on), q):.1f} ms, on/off {mean:.3f} [95% {lo:.3f}, {hi:.3f}]"
        )


def _side_by_side(
    args: argparse.Namespace,
    url: str,
    token: str,
    queries: list[str],
    tmp: Path,
    variants: dict[str, dict[str, str]],
) -> None:
    load = LoadConfig(rate=args.rate, duration_s=args.duration, warmup_s=args.warmup, seed=3)
    rounds: list[dict[str, LoadResult]] = []
    for round_no in range(1, args.rounds + 1):
        # Which server starts first alternates: the second one starts on a warmer machine.
        order = list(variants.items()) if round_no % 2 else list(reversed(variants.items()))
        with contextlib.ExitStack() as stack:
            bases, pids = {}, {}
            for name, env in order:
                bases[name], pids[name] = stack.enter_context(server(url, tmp, env_extra=env))
            rounds.append(asyncio.run(_side_by_side_round(bases, pids, token, queries, load)))
        r = rounds[-1]
        print(
            f"round {round_no}: p95 off {r['off'].p95_ms:.1f} on {r['on'].p95_ms:.1f}"
            f" (x{r['on'].p95_ms / r['off'].p95_ms:.3f}), CPU ms/req off"
            f" {r['off'].per_request['server']:.2f} on {r['on'].per_request['server']:.2f}",
            flush=True,
        )
    print(
        f"\nside by side: HTTP retrieve, hybrid, {args.chunks:,} chunks, {args.rate:g} req/s to each"
        f" server at once, {args.duration:g}s per round"
    )
    rows = []
    for n, r in enumerate(rounds, 1):
        rows += [
            [
                k,
                n,
                x.sent,
                x.ok,
                f"{x.p50_ms:.1f}",
                f"{x.p95_ms:.1f}",
                f"{x.p99_ms:.1f}",
                f"{x.per_request['server']:.2f}",
                f"{x.per_request['children']:.2f}",
            ]  # fmt: skip
            for k, x in r.items()
        ]
    print_table(
        ["tracing", "round", "sent", "ok", "p50 ms", "p95 ms", "p99 ms", "CPU ms/req", "+children"], rows
    )
    for field in ("p50_ms", "p95_ms", "p99_ms"):
        ratios = [getattr(r["on"], field) / getattr(r["off"], field) for r in rounds]
        mean, lo, hi = _geometric_interval(ratios)
        print(
            f"{field[:3]} on/off: geometric mean {mean:.3f} [95% {lo:.3f}, {hi:.3f}],"
            f" median {statistics.median(ratios):.3f}, per round " + ", ".join(f"{x:.2f}" for x in ratios)
        )
    _print_pooled([r["off"].latencies_ms for r in rounds], [r["on"].latencies_ms for r in rounds])
    cpu = [r["on"].per_request["server"] - r["off"].per_request["server"] for r in rounds]
    print(f"server CPU on - off, ms/req: median {statistics.median(cpu):+.2f}, per round "
          + ", ".join(f"{x:+.2f}" for x in cpu))  # fmt: skip


def main() -> None:
    args = _args()
    if args.encode:
        _encode(args)
        return
    port, exports, received = mp.Value("i", 0), mp.Value("q", 0), mp.Value("q", 0)
    sink = mp.Process(target=_serve, args=(port, exports, received), daemon=True)
    sink.start()
    while port.value == 0:
        time.sleep(0.05)
    endpoint = f"http://127.0.0.1:{port.value}"
    with (
        tempfile.TemporaryDirectory(prefix="ragline-bench-") as tmp_s,
        live_catalog(Path(tmp_s), args.chunks, queries=20_000) as (url, token, queries),
    ):
        tmp = Path(tmp_s)
        if args.paired:
            _paired(args, url, token, list(queries), tmp, endpoint)
            sink.terminate()
            return
        request = retrieve_requests(queries, token, top_k=8, mode="hybrid", rerank=False)
        load = LoadConfig(rate=args.rate, duration_s=args.duration, warmup_s=args.warmup, seed=3)
        runs: list[tuple[str, int, LoadResult]] = []
        variants = {
            "off": {"OTEL_SDK_DISABLED": "true"},
            "on": {
                "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
                "OTEL_BSP_SCHEDULE_DELAY": "1000",
                **dict(kv.split("=", 1) for kv in args.on_env),
            },
        }
        if args.side_by_side:
            _side_by_side(args, url, token, list(queries), tmp, variants)
            sink.terminate()
            print(f"OTLP exports received: {exports.value} ({received.value:,} bytes)")
            return
        for round_no in range(1, args.rounds + 1):
            # Alternate which goes first, so a warming (or cooling) machine favours neither.
            order = list(variants.items()) if round_no % 2 else list(reversed(variants.items()))
            for name, env in order:
                with server(url, tmp, env_extra=env) as (base, pid):
                    counters = {
                        "server": lambda: _cpu_seconds(pid, children=False) * 1000,
                        "children": lambda: (_cpu_seconds(pid) - _cpu_seconds(pid, children=False)) * 1000,
                    }
                    result = asyncio.run(run_rates(base, request, [load], counters=counters))[0]
                    runs.append((name, round_no, result))
    sink.terminate()
    print(f"\nHTTP retrieve, hybrid, {args.chunks:,} chunks, {args.rate:g} req/s, {args.duration:g}s each")
    print_table(
        ["tracing", "round", "sent", "ok", "p50 ms", "p95 ms", "p99 ms", "CPU ms/req", "+children"],
        [
            [
                k,
                n,
                r.sent,
                r.ok,
                f"{r.p50_ms:.1f}",
                f"{r.p95_ms:.1f}",
                f"{r.p99_ms:.1f}",
                f"{r.per_request['server']:.2f}",
                f"{r.per_request['children']:.2f}",
            ]  # fmt: skip
            for k, n, r in runs
        ],
    )

    def median(name: str, field: str) -> float:
        return statistics.median(getattr(r, field) for k, _, r in runs if k == name)

    p50, p95, p99 = (median("on", f) / median("off", f) for f in ("p50_ms", "p95_ms", "p99_ms"))
    print(f"ratio on/off (medians over {args.rounds} rounds): p50 {p50:.3f}, p95 {p95:.3f}, p99 {p99:.3f}")
    cpu = [
        statistics.median(r.per_request[c] for k, _, r in runs if k == name)
        for name in ("off", "on")
        for c in ("server", "children")
    ]
    print(
        f"CPU ms per request (medians; server process, its child processes): off {cpu[0]:.2f} + {cpu[1]:.2f},"
        f" on {cpu[2]:.2f} + {cpu[3]:.2f}"
    )
    by_round = {(k, n): r for k, n, r in runs}
    per_round = [by_round["on", n].p95_ms / by_round["off", n].p95_ms for n in range(1, args.rounds + 1)]
    print("p95 ratio on/off per round: " + ", ".join(f"{x:.2f}" for x in per_round))
    rounds = range(1, args.rounds + 1)
    _print_pooled(
        [by_round["off", n].latencies_ms for n in rounds], [by_round["on", n].latencies_ms for n in rounds]
    )
    print(f"OTLP exports received: {exports.value} ({received.value:,} bytes)")


if __name__ == "__main__":
    main()

"""Cold starts for ``bench.retrieve --cold``: the first period after a PostgreSQL and server
start, with nothing cached, warming off against warming on in the same run.

"Cold" means neither PostgreSQL's shared buffers nor the OS page cache hold the catalog or
the index: before each phase the server and PostgreSQL stop (shared buffers go), then every
file of the cluster and of the index versions is flushed and dropped from the page cache
with ``posix_fadvise(POSIX_FADV_DONTNEED)``. That needs no privilege and touches only our
own files; ``echo 1 > /proc/sys/vm/drop_caches`` would empty the cache of everything else
on a machine others share. ``fincore`` (util-linux), when present, reports what stayed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.common import print_table
from bench.load import LoadConfig, LoadResult, RequestSpec, print_results, run_rates
from catalog import embedded

PHASES = ("off", "on")  # retrieve.warm_seconds 0, then the default


def _files(roots: list[Path]) -> Iterator[Path]:
    for root in roots:
        for dirpath, _, names in os.walk(root):
            for name in names:
                path = Path(dirpath) / name
                if path.is_file() and not path.is_symlink():
                    yield path


def evict_page_cache(roots: list[Path]) -> int:
    """Write back and drop the cached pages of every file under ``roots``; returns bytes seen."""
    total = 0
    for path in _files(roots):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:  # a socket, a file removed meanwhile
            continue
        try:
            os.fsync(fd)  # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            total += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return total


def cached_bytes(roots: list[Path]) -> int | None:
    """Bytes of the files under ``roots`` that are in the page cache (``fincore``), or None."""
    fincore = shutil.which("fincore")
    if fincore is None:
        return None
    paths = [str(p) for p in _files(roots)]
    total = 0
    for start in range(0, len(paths), 500):
        out = subprocess.run(
            [fincore, "--bytes", "--noheadings", "--output", "RES", *paths[start : start + 500]],
            capture_output=True,
            text=True,
            check=False,
        )
        total += sum(int(line) for line in out.stdout.split() if line.isdigit())
    return total


@dataclass(frozen=True, slots=True)
class ColdPhase:
    warm: str  # "off" | "on"
    evicted_mb: float
    cached_mb: float | None  # what the page cache still held after eviction
    ready_s: float  # PostgreSQL start to the server's /readyz
    windows: list[LoadResult]  # consecutive periods from /readyz on: the first is the coldest
    probe: dict[str, list[float]]  # sequential requests instead of windows: ms per request


def sequential(base: str, request: Callable[[int], RequestSpec], count: int) -> dict[str, list[float]]:
    """``count`` requests one at a time: client ms and each server stage's ms, per request."""
    import httpx

    out: dict[str, list[float]] = {"client": []}
    with httpx.Client(base_url=base, timeout=30.0) as client:
        for i in range(count):
            spec = request(i)
            t = time.perf_counter()
            r = client.post(spec.path, json=spec.json, headers=spec.headers)
            out["client"].append((time.perf_counter() - t) * 1000)
            r.raise_for_status()
            for stage, ms in r.json()["timings_ms"].items():
                out.setdefault(stage, []).append(float(ms))
    return out


def restart_cold(cluster: embedded.LocalCluster, roots: list[Path]) -> tuple[float, float | None]:
    """Stop PostgreSQL, drop our files from the page cache, start it again."""
    embedded.down(cluster)
    evicted = evict_page_cache(roots)
    left = cached_bytes(roots)
    embedded.up(cluster)
    return evicted / 1e6, (left / 1e6 if left is not None else None)


def run_phase(
    warm: str,
    *,
    cluster: embedded.LocalCluster,
    roots: list[Path],
    start_server: Callable[[dict[str, str]], object],
    request: Callable[[int], RequestSpec],
    windows: list[LoadConfig],
    server_timings: Callable[..., dict[str, float]],
    check: Callable[[str], None],
    probe: int = 0,
) -> ColdPhase:
    """One cold start: restart PostgreSQL cold, start the server, measure at once.

    ``start_server`` is a context-manager factory taking extra environment and yielding
    ``(base_url, pid)``; the load begins as soon as the server is ready, without warm-up, and
    runs ``windows`` back to back (no pause between them), or with ``probe`` that many
    requests one at a time (no queueing: each request's own cold reads).
    """
    evicted_mb, cached_mb = restart_cold(cluster, roots)
    env = {"RAGLINE_RETRIEVE__WARM_SECONDS": "0"} if warm == "off" else {}
    t = time.perf_counter()
    with start_server(env) as (base, _pid):  # type: ignore[attr-defined]
        ready_s = time.perf_counter() - t
        if probe:
            results, probed = [], sequential(base, request, probe)
        else:
            results = asyncio.run(
                run_rates(base, request, windows, pause_s=0.0, server_timings=server_timings)
            )
            probed = {}
        check(base)  # after the measured period, which must start cold
    return ColdPhase(warm, evicted_mb, cached_mb, ready_s, results, probed)


def print_cold(phases: list[ColdPhase], stage: str = "fetch") -> None:
    """Per phase and window the client latency and the ``stage`` timings; the ratios are each
    window's p95 over the same window's with warming on (first round)."""
    on = next((p for p in phases if p.warm == "on"), None)
    print_table(
        ["warming", "evicted MB", "cached MB after", "ready s"],
        [
            [
                p.warm,
                round(p.evicted_mb, 1),
                "n/a" if p.cached_mb is None else round(p.cached_mb, 1),
                round(p.ready_s, 1),
            ]
            for p in phases
        ],
    )
    if any(p.probe for p in phases):
        _print_probes(phases, stage)
        return
    rows = []
    for p in phases:
        at = 0.0
        for i, w in enumerate(p.windows):
            base = on.windows[i] if on is not None and i < len(on.windows) else None
            nan = float("nan")
            rows.append(
                [
                    p.warm,
                    f"{at:g}-{at + w.duration_s:g}s",
                    w.ok,
                    round(w.p50_ms, 1),
                    round(w.p95_ms, 1),
                    round(w.server_p50_ms.get(stage, nan), 1),
                    round(w.server_p95_ms.get(stage, nan), 1),
                    f"{w.p95_ms / base.p95_ms:.2f}" if base else "n/a",
                    f"{w.server_p95_ms.get(stage, nan) / base.server_p95_ms.get(stage, nan):.2f}"
                    if base
                    else "n/a",
                ]
            )
            at += w.duration_s
    print()
    print_table(
        [
            "warming", "window", "ok", "p50 ms", "p95 ms", f"{stage} p50", f"{stage} p95",
            "x p95 vs on", f"x {stage} p95 vs on",
        ],
        rows,
    )  # fmt: skip
    print("\nper phase, as bench.retrieve prints rates (one row per window):")
    for p in phases:
        print(f"\nwarming {p.warm}:")
        print_results(p.windows)


def _print_probes(phases: list[ColdPhase], stage: str) -> None:
    import numpy as np

    def q(values: list[float], pct: float) -> float:
        return round(float(np.percentile(values, pct)), 1) if values else float("nan")

    rows = []
    for p in phases:
        for part, (lo, hi) in (("first 20", (0, 20)), ("all", (0, None))):
            c, f = p.probe["client"][lo:hi], p.probe.get(stage, [])[lo:hi]
            rows.append(
                [p.warm, part, len(c), q(c, 50), q(c, 95), q(f, 50), q(f, 95), round(max(f, default=0), 1)]
            )
    print()
    print_table(
        [
            "warming",
            "requests",
            "n",
            "client p50",
            "client p95",
            f"{stage} p50",
            f"{stage} p95",
            f"{stage} max",
        ],
        rows,
    )


def _explain_fetch(url: str, rows: list[int]) -> tuple[float, int, int]:
    """EXPLAIN (ANALYZE, BUFFERS) of the details fetch: (ms, shared blocks hit, read)."""
    import psycopg

    from catalog.serving import explain_chunk_details

    with psycopg.connect(url, autocommit=True) as conn:
        plan = explain_chunk_details(conn, rows=rows, tenant_id="bench", readers=["group:eng"])
    top = plan["Plan"]
    return float(plan["Execution Time"]), int(top["Shared Hit Blocks"]), int(top["Shared Read Blocks"])


def explain_main() -> None:
    """``python -m bench.cold --state-dir DIR``: one details fetch of 8 random chunks, EXPLAINed
    after a cold restart, after the server's start-up reads, and after warming."""
    import argparse

    import numpy as np
    import psycopg

    from catalog.maintenance import max_chunk_row
    from catalog.serving import chunk_positions
    from catalog.warm import prewarm_serving_reads

    p = argparse.ArgumentParser(description=explain_main.__doc__)
    p.add_argument("--state-dir", type=Path, required=True, help="a bench.retrieve --state-dir")
    p.add_argument("--fetches", type=int, default=20, help="fetches per step (medians reported)")
    args = p.parse_args()
    tmp = args.state_dir.resolve()
    cluster = embedded.cluster_for(tmp, port=int((tmp / "pg-port").read_text()), fsync=False)
    rng = np.random.default_rng(0)
    try:
        restart_cold(cluster, [cluster.pgdata, tmp / "indexes"])
        url = cluster.url
        with psycopg.connect(url) as conn:
            n = max_chunk_row(conn)

        def step(name: str) -> list[object]:
            runs = [_explain_fetch(url, rng.integers(1, n + 1, 8).tolist()) for _ in range(args.fetches)]
            ms, hit, read = (np.median([r[i] for r in runs]) for i in range(3))
            return [name, round(float(ms), 2), int(hit), int(read)]

        rows = [step("cold: PostgreSQL restarted, page cache dropped")]
        restart_cold(cluster, [cluster.pgdata, tmp / "indexes"])
        with psycopg.connect(url) as conn:  # what ServingState.load reads before any request
            t = time.perf_counter()
            chunk_positions(conn, rows=np.arange(1, n + 1, dtype=np.int64))
            load_s = time.perf_counter() - t
        rows.append(step(f"after the start-up's chunk_positions read ({load_s:.1f}s)"))
        restart_cold(cluster, [cluster.pgdata, tmp / "indexes"])
        with psycopg.connect(url) as conn:
            t = time.perf_counter()
            result = prewarm_serving_reads(conn, budget_s=60)
            warm_s = time.perf_counter() - t
        rows.append(step(f"after warming ({result.method}, {result.megabytes:.0f} MB, {warm_s:.1f}s)"))
        print(
            f"details fetch of 8 random chunks of {n:,}, medians of {args.fetches},"
            f" load {os.getloadavg()[0]:.1f}"
        )
        print_table(["state", "execution ms", "shared hit", "shared read"], rows)
    finally:
        embedded.down(cluster)


if __name__ == "__main__":
    explain_main()

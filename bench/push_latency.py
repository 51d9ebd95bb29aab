"""Push-to-searchable under a steady stream of single-document pushes (issue 23).

Run: ``OPENBLAS_NUM_THREADS=1 HF_HUB_OFFLINE=1 python -m bench.push_latency --rate 10 --pushes 200
--repeat 2 --limit 20``.

On a throwaway PostgreSQL, the whole API in-process (ingest runner inline, search service,
the bundled model): one tenant pushes ``--pushes`` one-document batches at ``--rate`` per
second. Each document's push-to-searchable is its item's commit time (from then on the
delta serves it) minus the time its push was answered; the last document is also searched
for by its own word until a retrieve returns it. Baseline: ``ingest.coalesce_max_documents=0``
(every push its own job, the behaviour before the fix) against the default (small pushes
join the tenant's queued push job), in the same run, ``--repeat`` rounds interleaved; no
queue limit in either. ``--limit N`` adds a run with ``ingest.max_queued_documents=N``:
pushes past it get 429 and are counted, not retried (a client would come back after
``Retry-After``), and the latencies are the accepted documents'.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import os
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import psycopg
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.app import create_app
from api.services import ingest_hook, search_hook
from authz.api_keys import create_key
from bench.common import print_table
from bench.ingest import fresh_database, load_line, machine_line
from catalog import jobs as jobs_repo
from core.settings import Settings
from index.embedder import Embedder, load_embedder
from testkit.clusters import throwaway_cluster

MODEL = "bundled:all-MiniLM-L6-v2"
WAIT_S = 1800.0


@dataclasses.dataclass(frozen=True, slots=True)
class Run:
    name: str
    pushes: int
    jobs: int
    peak_queued_jobs: int
    p50_s: float
    p95_s: float
    max_s: float
    last_searchable_s: float  # from the last push's answer to a retrieve returning it
    drain_s: float  # from the last push's answer to every job finished
    refused: int  # pushes answered 429 (over the queue depth), not retried here
    load: float  # the 1-minute load average when the run ended (other processes share the cores)


def _doc(n: int) -> dict:
    text = f"Note {n}: the quarterly report mentions marker{n}x among other routine items."
    return {
        "external_id": f"note-{n}",
        "content_base64": base64.b64encode(text.encode()).decode(),
        "mime_type": "text/plain",
        "acl": {"public": True},
    }


def _inline_ingest(app: FastAPI, settings: Settings, *, embedder: Embedder) -> Callable[[], None]:
    close = ingest_hook(app, settings, embedder=embedder)
    app.state.runner.config = dataclasses.replace(app.state.runner.config, use_ray=False)
    return close


def _jobs_in(url: str, *states: str) -> int:
    """Jobs of any kind in one of ``states`` (all jobs when none is named)."""
    with psycopg.connect(url) as conn:
        counts = jobs_repo.count_by_state(conn)
    return sum(n for (_, state), n in counts.items() if not states or state in states)


def _queued_jobs(url: str) -> int:
    return _jobs_in(url, "queued")


def run(
    name: str,
    url: str,
    data: Path,
    embedder: Embedder,
    *,
    coalesce: int,
    limit: int,
    pushes: int,
    rate: float,
) -> Run:
    settings = Settings(
        data_dir=data,
        database_url=url,
        log_level="WARNING",
        ingest={"coalesce_max_documents": coalesce, "max_queued_documents": limit},
        limits={"rate_per_key": 1000.0, "burst_per_key": 1000},
    )
    with psycopg.connect(url) as conn:
        ingest_key = create_key(conn, tenant_id="bench", roles=["ingest"]).token
        query_key = create_key(conn, tenant_id="bench", roles=["query"]).token
    hooks: list[Callable[[FastAPI, Settings], Callable[[], None]]] = [
        partial(_inline_ingest, embedder=embedder),
        partial(search_hook, embedder=embedder),
    ]
    answered: dict[str, float] = {}
    peak = refused = last_n = 0
    with TestClient(create_app(settings, hooks=hooks)) as client:
        stop = threading.Event()

        def watch() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, _queued_jobs(url))
                stop.wait(0.5)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        start = time.monotonic()
        for n in range(pushes):
            time.sleep(max(0.0, start + n / rate - time.monotonic()))
            r = client.post(
                "/v1/documents",
                json={"documents": [_doc(n)]},
                headers={"Authorization": f"Bearer {ingest_key}"},
            )
            if r.status_code == 429:  # over the queue depth: a client would come back later
                refused += 1
                continue
            r.raise_for_status()
            answered[f"note-{n}"] = time.time()
            last_n = n
        last = time.time()
        last_searchable = _wait_searchable(client, query_key, f"marker{last_n}x", f"note-{last_n}") - last
        drain = _wait_drained(url) - last
        stop.set()
        watcher.join()
    with psycopg.connect(url) as conn:
        committed = {k: at.timestamp() for k, at in jobs_repo.succeeded_item_times(conn).items()}
    jobs = _jobs_in(url)
    if len(committed) != len(answered):
        raise SystemExit(f"{name}: {len(committed)} of {len(answered)} accepted documents were written")
    lat = sorted(committed[k] - answered[k] for k in answered)
    return Run(
        name,
        pushes,
        jobs,
        peak,
        statistics.median(lat),
        lat[int(0.95 * (len(lat) - 1))],
        lat[-1],
        last_searchable,
        drain,
        refused,
        os.getloadavg()[0],
    )


def _wait_searchable(client: TestClient, key: str, query: str, external_id: str) -> float:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        out = client.post(
            "/v1/retrieve",
            json={"query": query, "top_k": 3, "mode": "lexical"},
            headers={"Authorization": f"Bearer {key}"},
        ).json()
        if any(r["document_external_id"] == external_id for r in out.get("results", [])):
            return time.time()
        time.sleep(0.2)
    raise SystemExit(f"{external_id} was not searchable after {WAIT_S} s")


def _wait_drained(url: str) -> float:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if _jobs_in(url, "queued", "running") == 0:
            return time.time()
        time.sleep(0.2)
    raise SystemExit(f"jobs still queued after {WAIT_S} s")


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rate", type=float, default=10.0, help="pushes per second")
    p.add_argument("--pushes", type=int, default=150)
    p.add_argument("--coalesce", type=int, default=256, help="ingest.coalesce_max_documents of the fixed run")
    p.add_argument("--repeat", type=int, default=1, help="rounds of runs, interleaved (off, on, off, on...)")
    p.add_argument("--limit", type=int, default=0, help="also run with ingest.max_queued_documents=LIMIT")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _args(argv)
    print(machine_line())
    print(f"command: {shlex.join(['python', '-m', 'bench.push_latency', *sys.argv[1:]])}")
    with throwaway_cluster("ragline-bench-push-") as (cluster, tmp):
        embedder = load_embedder(MODEL, batch_size=32)
        modes = [("one job per push", "off", 0, 0), ("coalesced", "on", args.coalesce, 0)]
        if args.limit:
            modes.append((f"coalesced, limit {args.limit}", "limit", args.coalesce, args.limit))
        runs = [
            run(
                name,
                fresh_database(cluster, f"{db}{n}"),
                Path(tmp, f"{db}{n}"),
                embedder,
                coalesce=c,
                limit=lim,
                pushes=args.pushes,
                rate=args.rate,
            )
            for n in range(args.repeat)
            for name, db, c, lim in modes
        ]
    print(f"\n{args.pushes} one-document pushes at {args.rate:g}/s, one tenant, inline runner:")
    head = ["mode", "jobs", "429", "peak queued jobs", "p50 s", "p95 s", "max s", "last searchable s"]
    rows = []
    per_round = len(runs) // args.repeat
    for i, r in enumerate(runs):
        base = runs[i - i % per_round]  # this round's run with coalescing off
        shown = [
            r.name,
            r.jobs,
            r.refused,
            r.peak_queued_jobs,
            r.p50_s,
            r.p95_s,
            r.max_s,
            r.last_searchable_s,
        ]
        rows.append([*shown, r.drain_s, f"{r.p95_s / base.p95_s:.3f}", f"{r.load:.1f}"])
    print_table([*head, "drain s", "p95 vs off (round)", "load 1 min"], rows)
    print(f"\nat the end: {load_line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

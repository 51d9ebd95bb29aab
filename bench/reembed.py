"""Model migration benchmark: backfill chunks/s vs raw ``model.encode`` chunks/s, and
``/v1/retrieve`` latency while the migration runs vs idle, all in the same run.

    python -m bench.reembed [--docs 300] [--queries 150] [--qps 10] [--ray]

The corpus (Cranfield from ../shared/data, or the samples) is ingested with the bundled
model and served as ``live``; the migration target is the same MiniLM loaded from its folder
(a different model name, so every chunk is re-embedded; same architecture, so its encode
rate is the fair baseline). The raw baseline encodes the same chunk texts in batches of
``reembed.batch_chunks`` with ``reembed.threads`` threads, as the migration does. Queries go
through the whole API in-process (TestClient), one at a time, each text new (no cache hits),
while the migration runs in a
background thread (``--ray``: on a Ray actor in another process, as in production), and idle
again after the swap. "During" counts only the queries sent while the backfill embedded (the
job reports that window); the idle baseline is the queries before and after the migration.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg

from bench.common import print_table
from bench.ingest import (
    CRANFIELD,
    MODEL,
    READER,
    TENANT,
    api_client,
    cranfield_items,
    fresh_database,
    load_line,
    machine_line,
    sample_items,
    start_ray,
)
from catalog import embedded, indexes
from catalog import jobs as jobs_repo
from catalog.jobs import NewItem
from catalog.maintenance import live_leaf_texts
from catalog.principals import ensure_tenant
from core.settings import Settings
from index.embedder import Embedder, load_embedder, resolve_model_path
from jobs.rebuild_job import rebuild
from jobs.reembed_job import ReembedArgs, run_reembed
from retrieve.delta import lexical_text
from services.migration import start_reembed
from testkit.clusters import throwaway_cluster
from wiring import make_runner, rebuild_config
from wiring.reembed import reembed_config

TARGET_RATIO = 0.8
LATENCY_RATIO = 1.5


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.reembed", description=__doc__)
    p.add_argument("--docs", type=int, default=300, help="documents to ingest")
    p.add_argument(
        "--queries", type=int, default=150, help="idle queries (the migration runs as long as it runs)"
    )
    p.add_argument("--qps", type=float, default=10.0, help="query rate, idle and during (0: back to back)")
    p.add_argument(
        "--ray", action="store_true", help="embed on a Ray actor (another process), as in production"
    )
    p.add_argument(
        "--priority", choices=("idle", "nice"), help="override reembed.priority (default: the setting)"
    )
    return p.parse_args(argv)


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] if ordered else 0.0


def _ingest(settings: Settings, url: str, embedder: Embedder, items: list[NewItem]) -> None:
    with psycopg.connect(url) as conn:
        ensure_tenant(conn, tenant_id=TENANT)
        job = jobs_repo.create_job(conn, tenant_id=TENANT, kind="ingest", items=items)
    assert make_runner(settings, url, use_ray=False, embedder=embedder).run_job(job) == "succeeded"


def _texts(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = live_leaf_texts(conn)
    return [lexical_text(t, p) for t, p in rows]


def _paced(qps: float, started: float, i: int) -> None:
    """Sleep until query ``i``'s slot at ``qps`` (open-loop pacing; 0 = back to back)."""
    if qps > 0:
        time.sleep(max(0.0, started + i / qps - time.perf_counter()))


def _query(client: Any, headers: dict[str, str], text: str) -> tuple[float, float]:
    """(wall-clock start, latency in ms) of one ``/v1/retrieve``."""
    at, t = time.time(), time.perf_counter()
    r = client.post("/v1/retrieve", json={"query": text, "top_k": 8}, headers=headers)
    if r.status_code != 200:
        raise SystemExit(f"bench.reembed: /v1/retrieve answered {r.status_code}: {r.text[:200]}")
    return at, (time.perf_counter() - t) * 1000


def main(argv: Sequence[str] | None = None) -> int:
    args = _args(argv)
    items = cranfield_items(args.docs) if CRANFIELD.exists() else sample_items(args.docs)
    print(machine_line())
    print(f"command: python -m bench.reembed {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip())
    with throwaway_cluster("ragline-bench-reembed-") as (cluster, tmp):
        _run(args, items, cluster, tmp)
        print(f"\nat the end: {load_line()}")
    return 0


def _run(args: argparse.Namespace, items: list[NewItem], cluster: embedded.LocalCluster, tmp: Path) -> None:
    from authz.api_keys import create_key

    url = fresh_database(cluster, "reembed")
    settings = Settings(
        data_dir=tmp,
        database_url=url,
        log_level="WARNING",
        index={"maintenance_seconds": 0, "poll_seconds": 0.5},
        reembed={"priority": args.priority} if args.priority else {},
    )
    embedder = load_embedder(MODEL, batch_size=settings.ingest.embed_batch_size)
    _ingest(settings, url, embedder, items)
    version = rebuild(url, rebuild_config(settings))
    with psycopg.connect(url) as conn, conn.transaction():
        indexes.swap_alias(conn, alias="live", version_id=version)
        token = create_key(conn, tenant_id=TENANT, roles=["query"], principal_id=READER).token
    texts = _texts(url)
    target = str(Path(resolve_model_path(MODEL)).resolve())
    r = settings.reembed
    print(
        f"corpus: {len(items)} documents, {len(texts)} leaf chunks; target {target}"
        f" (priority {r.priority}, nice {r.nice}, threads {r.threads}, cpus {r.cpus or 'all'},"
        f" batch {r.batch_chunks})"
    )
    raw_model = load_embedder(target, device="cpu", batch_size=r.batch_chunks, threads=r.threads)
    t = time.perf_counter()
    for start in range(0, len(texts), r.batch_chunks):
        raw_model.embed(texts[start : start + r.batch_chunks])
    raw_rate = len(texts) / (time.perf_counter() - t)
    if args.ray:
        start_ray(tmp)
    headers = {"Authorization": f"Bearer {token}"}
    queries = [" ".join(t.split()[:8]) for t in texts]
    with api_client(settings, embedder) as client:
        client.app.state.search.watcher.check_alias(psycopg.connect(url))
        for q in queries[:10]:  # warm-up
            _query(client, headers, q)
        # Every query text is new (a counter word), so the query-embedding cache never answers.
        idle: list[float] = []
        t0 = time.perf_counter()
        for i in range(args.queries):
            _paced(args.qps, t0, i)
            idle.append(_query(client, headers, f"{queries[i % len(queries)]} q{i}")[1])
        config = reembed_config(settings, url, ReembedArgs(model=target), actor="bench", use_ray=args.ray)
        config = replace(config, build=replace(config.build, n_shards=settings.index.shards))
        job_id = start_reembed(url, config)
        states: list[str | None] = []
        worker = threading.Thread(target=lambda: states.append(run_reembed(url, job_id, config)))
        worker.start()
        timed: list[tuple[float, float]] = []
        i, t0 = 0, time.perf_counter()
        while worker.is_alive():
            _paced(args.qps, t0, i)
            timed.append(_query(client, headers, f"{queries[i % len(queries)]} m{i}"))
            i += 1
        worker.join()
        # Idle again after the swap: the baseline brackets the migration in time, so a load
        # change from other jobs on a shared machine shows up as before/after disagreeing.
        after: list[float] = []
        time.sleep(5.0)  # the servers load the new version (and its query model) after the swap
        t0 = time.perf_counter()
        for i in range(args.queries):
            _paced(args.qps, t0, i)
            after.append(_query(client, headers, f"{queries[i % len(queries)]} a{i}")[1])
    with psycopg.connect(url) as conn:
        job = jobs_repo.get_job(conn, job_id=job_id)
    report = dict(job.params["report"]) if job else {}
    backfill = report.get("backfill", {})
    rate = float(backfill.get("chunks_per_s", 0.0))
    # "During" is only while the backfill embeds (the job's own window: actor start-up, the
    # index build and the gate are excluded; they are not the backfill's cost to serving).
    window = backfill.get("embedding_window") or (0.0, 0.0)
    during = [ms for at, ms in timed if window[0] <= at <= window[1]]
    if not during:
        raise SystemExit("bench.reembed: no query ran while the backfill embedded (more --docs?)")
    shown = {k: v for k, v in backfill.items() if k != "embedding_window"}
    print(
        f"\nmigration: {states[0]}; backfill {shown};"
        f" embedded on {'a Ray actor' if args.ray else 'a thread of this process'}"
        f"\nduring = the {len(during)} of {len(timed)} queries sent while the backfill embedded"
        f" ({window[1] - window[0]:.1f} s; the rest ran during start-up, build and gate);"
        f" idle = {len(idle)} queries before it started and {len(after)} after the swap"
        f" (p95 {_p(idle, 0.95):.1f} / {_p(after, 0.95):.1f} ms); all at {args.qps:g} qps."
        f"\nchunks/s = backfill vectors written per second of embedding; baseline = raw"
        f" model.encode of the same texts at normal priority in this process, same threads and batch."
    )
    idle = idle + after
    print_table(
        ["measure", "value", "baseline (same run)", "ratio", "goal"],
        [
            ["embed chunks/s", rate, raw_rate, rate / raw_rate, f">= {TARGET_RATIO}"],
            [
                "/v1/retrieve p95 ms",
                _p(during, 0.95),
                _p(idle, 0.95),
                _p(during, 0.95) / _p(idle, 0.95),
                f"<= {LATENCY_RATIO}",
            ],
            [
                "/v1/retrieve p50 ms",
                statistics.median(during),
                statistics.median(idle),
                statistics.median(during) / statistics.median(idle),
                "",
            ],
            ["queries", len(during), len(idle), "", ""],
        ],
    )


if __name__ == "__main__":
    raise SystemExit(main())

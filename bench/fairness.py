"""Fair scheduling and cancel latency of the ingest runner (issue 17).

Run: ``OPENBLAS_NUM_THREADS=1 HF_HUB_OFFLINE=1 python -m bench.fairness --big-chunks 300``.

On a throwaway PostgreSQL, inline path, the bundled model:

1. tenant A pushes one big document (``--big-chunks`` leaf chunks); once its first encode call
   has started, tenant B pushes one small document. Measured: B's wait from its submit to its
   job's end, and A's whole job. Baseline: ``concurrent_jobs=1`` (one job at a time, the
   runner before the fix) against the default 2 (at most one job per tenant), same run;
2. a cancel during the big document, after ``--cancel-after`` encode calls: seconds from the
   request to the job's end and encode calls made after it, against the whole document's time
   from (1).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from bench.common import print_table
from bench.ingest import fresh_database, load_line, machine_line
from catalog import jobs as jobs_repo
from catalog.jobs import NewItem
from catalog.principals import ensure_tenant
from core.records import Acl
from core.settings import Settings
from index.embedder import load_embedder
from jobs.runner import IngestRunner
from testkit.clusters import throwaway_cluster
from testkit.embedders import HookedEmbedder
from wiring import make_runner

MODEL = "bundled:all-MiniLM-L6-v2"
BIG_MARK = "zebraword"
WAIT_S = 900.0
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron".split()


def big_text(chunks: int) -> str:
    """About ``chunks`` leaf chunks of 256 tokens: one paragraph of ~180 words per chunk."""
    return "\n\n".join(
        BIG_MARK + " " + " ".join(WORDS[(p + w) % len(WORDS)] for w in range(180)) + "."
        for p in range(chunks)
    )


def create(url: str, tenant: str, external_id: str, text: str) -> uuid.UUID:
    with psycopg.connect(url) as conn:
        ensure_tenant(conn, tenant_id=tenant)
        item = NewItem(
            external_id=external_id, mime_type="text/plain", payload=text.encode(), acl=Acl((), True)
        )
        return jobs_repo.create_job(conn, tenant_id=tenant, kind="ingest", items=[item])


@dataclass(frozen=True, slots=True)
class FairRun:
    concurrent_jobs: int
    small_wait_s: float
    big_total_s: float
    order: str


def fair_run(settings: Settings, url: str, embedder: HookedEmbedder, big: str, concurrent: int) -> FairRun:
    big_started, ended = threading.Event(), {}
    marks: dict[str, float] = {}
    finished: list[uuid.UUID] = []
    lock = threading.Lock()

    def on_finished(conn: psycopg.Connection, job_id: uuid.UUID, state: str) -> None:
        with lock:
            finished.append(job_id)
            ended[job_id] = time.perf_counter()

    def before(texts: Sequence[str]) -> None:
        if any(BIG_MARK in t for t in texts):
            big_started.set()

    embedder.before = before
    run_settings = settings.model_copy(
        update={"ingest": settings.ingest.model_copy(update={"concurrent_jobs": concurrent})}
    )
    runner: IngestRunner = make_runner(run_settings, url, use_ray=False, embedder=embedder)
    runner.on_finished = on_finished
    runner.start(resume=False)
    try:
        marks["big"] = time.perf_counter()
        big_job = create(url, "tenant-a", "big", big)
        runner.submit(big_job)
        if not big_started.wait(WAIT_S):
            raise RuntimeError("the big job never started embedding")
        small_job = create(url, "tenant-b", "small", " ".join(WORDS) + ".")
        marks["small"] = time.perf_counter()
        runner.submit(small_job)
        if not runner.wait_idle(WAIT_S):
            raise RuntimeError("the runner did not finish both jobs")
    finally:
        runner.close()
        embedder.before = None
    order = " then ".join("B (small)" if j == small_job else "A (big)" for j in finished)
    return FairRun(concurrent, ended[small_job] - marks["small"], ended[big_job] - marks["big"], order)


@dataclass(frozen=True, slots=True)
class CancelRun:
    cancel_to_end_s: float
    calls_after_cancel: int
    calls_before_cancel: int


def cancel_run(settings: Settings, url: str, embedder: HookedEmbedder, big: str, after: int) -> CancelRun:
    job_id = create(url, "tenant-c", "big", big)
    requested: list[tuple[float, int]] = []

    def before(texts: Sequence[str]) -> None:
        if any(BIG_MARK in t for t in texts) and embedder.calls_with(BIG_MARK) == after and not requested:
            with psycopg.connect(url, autocommit=True) as conn:
                jobs_repo.request_cancel(conn, job_id=job_id, tenant_id=None)
            requested.append((time.perf_counter(), embedder.calls_with(BIG_MARK)))

    embedder.forget_calls()
    embedder.before = before
    runner = make_runner(settings, url, use_ray=False, embedder=embedder)
    try:
        state = runner.run_job(job_id)
    finally:
        embedder.before = None
    if state != "cancelled" or not requested:
        raise RuntimeError(f"the cancelled job ended {state}")
    at, calls = requested[0]
    return CancelRun(time.perf_counter() - at, embedder.calls_with(BIG_MARK) - calls, calls)


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--big-chunks", type=int, default=300, help="leaf chunks of the big document")
    parser.add_argument("--cancel-after", type=int, default=3, help="encode calls before the cancel")
    args = parser.parse_args(argv)
    if args.big_chunks < 10 or args.cancel_after < 1:
        parser.error("--big-chunks must be at least 10 and --cancel-after at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _args(argv)
    print(machine_line())
    print(f"command: {shlex.join(['python', '-m', 'bench.fairness', *sys.argv[1:]])}")
    with throwaway_cluster("ragline-bench-fair-") as (cluster, tmp):
        settings = Settings(data_dir=tmp, log_level="WARNING")
        embedder = HookedEmbedder(load_embedder(MODEL, batch_size=settings.ingest.embed_batch_size))
        big = big_text(args.big_chunks)
        runs = [fair_run(settings, fresh_database(cluster, f"fair{n}"), embedder, big, n) for n in (1, 2)]
        base = runs[0]
        print(f"\nB's one small document pushed while A's big one ({args.big_chunks} chunks) embeds:")
        print_table(
            ["concurrent_jobs", "B submit -> done s", "vs 1 job at a time", "A whole job s", "finished"],
            [
                [
                    r.concurrent_jobs,
                    r.small_wait_s,
                    f"{r.small_wait_s / base.small_wait_s:.3f}",
                    r.big_total_s,
                    r.order,
                ]
                for r in runs
            ],
        )
        cancel = cancel_run(settings, fresh_database(cluster, "cancel"), embedder, big, args.cancel_after)
        whole = runs[-1].big_total_s
        print(f"\ncancel during the big document, after {cancel.calls_before_cancel} encode calls:")
        print_table(
            ["measure", "cancel -> cancelled s", "encode calls after", "vs whole document"],
            [
                [
                    "cancel",
                    cancel.cancel_to_end_s,
                    cancel.calls_after_cancel,
                    f"{cancel.cancel_to_end_s / whole:.3f}",
                ]
            ],
        )
        print(f"\nat the end: {load_line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

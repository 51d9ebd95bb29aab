"""The pools' connection check, per checkout: on every checkout vs only after 1 s idle.

Run: ``python -m bench.pool_check --checkouts 5000``. One local PostgreSQL cluster (or
``RAGLINE_DATABASE_URL``); three pools of one connection each, opened as the API opens its read
pool (``catalog.db.open_pool``, autocommit): "no check" is the baseline, "check every
checkout" is psycopg_pool's ``check_connection`` on each hand-out (what ``open_pool`` does),
"check after 1 s idle" the alternative that was measured and rejected (it slowed recovery
after a PostgreSQL restart, docs/benchmarks.md). Each checkout runs one ``SELECT 1``,
as the retrieve path's single-statement reads do; the variants alternate in rounds so drift
on a shared machine hits them alike. The table gives the time per checkout and its ratio to
the baseline.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg_pool import ConnectionPool

from bench.common import print_table
from bench.retrieve import database
from catalog import db

IDLE_S = 1.0
_RETURNED_AT = "_bench_returned_at"


def _stamp_return(conn: psycopg.Connection) -> None:
    setattr(conn, _RETURNED_AT, time.monotonic())


def _check_if_idle(conn: psycopg.Connection) -> None:
    if time.monotonic() - getattr(conn, _RETURNED_AT, float("-inf")) >= IDLE_S:
        ConnectionPool.check_connection(conn)


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkouts", type=int, default=5000, help="checkouts per variant and round")
    p.add_argument("--rounds", type=int, default=5)
    return p.parse_args()


def _per_checkout_us(pool: ConnectionPool, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        with pool.connection() as conn:
            conn.execute("SELECT 1").fetchone()
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    args = _args()
    with tempfile.TemporaryDirectory(prefix="ragline-bench-") as tmp, database(Path(tmp)) as url:
        variants = {
            "no check (baseline)": (None, None),
            "check every checkout (open_pool)": (ConnectionPool.check_connection, None),
            "check after 1 s idle": (_check_if_idle, _stamp_return),
        }
        pools = {}
        for name, (check, reset) in variants.items():
            pool = db.open_pool(url, size=1, name=name, autocommit=True)
            # the knobs that differ; psycopg_pool reads them per checkout and per return
            pool._check, pool._reset = check, reset
            pools[name] = pool
        try:
            times: dict[str, list[float]] = {name: [] for name in pools}
            for pool in pools.values():  # warm-up: connections made, statements cached
                _per_checkout_us(pool, 200)
            for _ in range(args.rounds):
                for name, pool in pools.items():
                    times[name].append(_per_checkout_us(pool, args.checkouts))
        finally:
            for pool in pools.values():
                pool.close()
    base = statistics.median(times["no check (baseline)"])
    rows = []
    for name, samples in times.items():
        median = statistics.median(samples)
        rows.append((name, round(median, 1), round(min(samples), 1), round(median / base, 2)))
    print(f"{args.rounds} rounds of {args.checkouts} checkouts per variant, each with one SELECT 1")
    print_table(["variant", "µs per checkout (median)", "best round", "x baseline"], rows)


if __name__ == "__main__":
    main()

"""Spurious "database down" verdicts of the deadline-bounded pool, with PostgreSQL up.

Run: ``python -m bench.pool_deadline --seconds 15``. One local PostgreSQL
cluster (or ``RAGLINE_DATABASE_URL``); two pools as the API opens its write pool (max 2
connections here, growing from one on demand), under the same load in turn: more threads
than connections, each checking one out with a request deadline (``--deadline-ms``), holding
it for a statement of about ``--hold-ms`` and giving it back, so waits are longer than
half a second but shorter than the deadline; every ``--late-every``-th checkout is made past its deadline, as
an abandoned request's next checkout is (the admission middleware answered it already). The
baseline is the rule before this stop (any wait that ran out marked the pool failing, cutting
every later wait to 0.5 s until a checkout succeeded); "DeadlinePool" is ``catalog.db``'s
(only failed connection attempts mean down). A PoolTimeout that is not the request's own
deadline is a "down" verdict: the API answers it 503 ``database_unavailable``. PostgreSQL
is up throughout, so each one is spurious.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg
from psycopg_pool import PoolTimeout

from bench.common import print_table
from bench.retrieve import database
from catalog import db
from core.context import deadline_var


class TimeoutMeansDown(db.DeadlinePool):
    """The rule before this stop, kept to measure against: a wait that ran out (a request
    past its deadline included) marked the pool failing until the next checkout."""

    _failing = False

    def getconn(self, timeout: float | None = None) -> psycopg.Connection:
        wait = self.timeout if timeout is None else timeout
        deadline = deadline_var.get()
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
        start = time.monotonic()
        end = start + max(0.0, wait)
        while True:
            errors = self.get_stats().get("connections_errors", 0)
            failing = self._failing or errors > self._errors_seen
            left = max(0.0, end - time.monotonic())
            try:
                conn: psycopg.Connection = db.ConnectionPool.getconn(
                    self, timeout=min(left, db._FAILING_WAIT_S if failing else db._WAIT_SLICE_S)
                )
            except PoolTimeout:
                if failing or time.monotonic() >= end - 0.001:
                    self._failing = True
                    raise PoolTimeout(
                        f"couldn't get a connection after {time.monotonic() - start:.2f} sec"
                    ) from None
                continue
            self._failing, self._errors_seen = False, errors
            return conn


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=15.0, help="load per variant")
    p.add_argument("--threads", type=int, default=24)
    p.add_argument("--pool-size", type=int, default=2)
    p.add_argument("--deadline-ms", type=int, default=2000)
    p.add_argument("--hold-ms", type=float, default=100.0, help="mean time a connection is held")
    p.add_argument("--late-every", type=int, default=50, help="every n-th checkout is past its deadline")
    return p.parse_args()


def _load(pool: db.DeadlinePool, args: argparse.Namespace) -> Counter[str]:
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()
    stop = time.monotonic() + args.seconds
    counter = iter(range(10**9))

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < stop:
            late = next(counter) % args.late_every == 0
            deadline = time.monotonic() + (-1.0 if late else args.deadline_ms / 1000)
            token = deadline_var.set(deadline)
            try:
                with pool.connection() as conn:
                    conn.execute("SELECT pg_sleep(%s)", (rng.uniform(0.5, 1.5) * args.hold_ms / 1000,))
                outcome = "ok"
            except db.DeadlinePassed:
                outcome = "deadline"
            except PoolTimeout:  # the old rule raises plain PoolTimeout for both
                outcome = "deadline" if time.monotonic() >= deadline - 0.005 else "down"
            finally:
                deadline_var.reset(token)
            with lock:
                outcomes["late" if late else outcome] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def main() -> None:
    args = _args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ragline-bench-") as tmp, database(Path(tmp)) as url:
        for name, cls in (
            ("a timed-out wait means down (baseline)", TimeoutMeansDown),
            ("DeadlinePool", db.DeadlinePool),
        ):
            pool = cls(url, min_size=1, max_size=args.pool_size, name=name, open=False, timeout=10.0)
            pool.open(wait=True, timeout=15.0)
            try:
                got = _load(pool, args)
            finally:
                pool.close()
            timely = got["ok"] + got["deadline"] + got["down"]
            rows.append(
                [
                    name,
                    str(timely),
                    str(got["ok"]),
                    str(got["deadline"]),
                    str(got["down"]),
                    f"{got['down'] / max(1, timely):.2%}",
                    str(got["late"]),
                ]
            )
    print_table(
        [
            "variant",
            "checkouts",
            "ok",
            "deadline passed",
            "spurious 'down'",
            "down share",
            "late (past deadline)",
        ],
        rows,
    )


if __name__ == "__main__":
    main()

"""Connections and schema migrations.

Migrations are numbered SQL files in ``catalog/migrations``; each is applied once, in its own
transaction, and recorded in ``schema_migrations``. A transaction-level advisory lock makes
concurrent start-ups (several API replicas, a job runner) safe: the second waits, then finds
everything applied.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from dataclasses import dataclass
from importlib import resources

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from catalog import audit
from core import tracing
from core.context import deadline_var
from core.errors import ConfigError

log = logging.getLogger(__name__)

# Arbitrary but fixed: the advisory lock key that serialises migrations.
_MIGRATION_LOCK = 0x7261676C696E65
# A connection attempt to a host that does not answer gives up after this long (libpq's own
# default is to wait forever); a refused connection fails at once anyway.
_CONNECT_TIMEOUT_S = 5
# While the database is down a wait for a connection lasts at most this long (DeadlinePool).
_FAILING_WAIT_S = 0.5
_WAIT_SLICE_S = 1.0
# A failing reconnection is given up after this long (psycopg_pool's default: 5 minutes, its
# backoff doubling to minutes between tries). Given up, the next request that needs a
# connection starts a new attempt at once, so the pool is back within about a second of the
# database, never after a long backoff sleep.
_RECONNECT_S = 2.0
_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    number: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations() -> list[Migration]:
    """The packaged migrations in order; file names are ``NNN_name.sql``."""
    found = []
    for entry in resources.files("catalog.migrations").iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    found.sort(key=lambda m: m.number)
    numbers = [m.number for m in found]
    if len(set(numbers)) != len(numbers):
        raise ConfigError(f"duplicate migration numbers: {numbers}")
    return found


def apply_migrations(conninfo: str) -> list[int]:
    """Apply every pending migration; returns the numbers applied by this call."""
    applied_now: list[int] = []
    with psycopg.connect(conninfo, autocommit=True) as conn:
        with conn.transaction():
            # Under the lock too: concurrent CREATE TABLE IF NOT EXISTS can fail on pg_type.
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (number integer PRIMARY KEY,"
                " name text NOT NULL, checksum text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
        for migration in load_migrations():
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                row = conn.execute(
                    "SELECT checksum FROM schema_migrations WHERE number = %s", (migration.number,)
                ).fetchone()
                if row is not None:
                    if row[0] != migration.checksum:
                        log.warning("migration %03d changed after it was applied", migration.number)
                    continue
                conn.execute(migration.sql.encode())
                conn.execute(
                    "INSERT INTO schema_migrations (number, name, checksum) VALUES (%s, %s, %s)",
                    (migration.number, migration.name, migration.checksum),
                )
                audit.record(
                    conn,
                    actor="migrations",
                    action="schema.migrate",
                    target=f"{migration.number:03d}_{migration.name}",
                    details={"checksum": migration.checksum},
                )
                applied_now.append(migration.number)
                log.info("applied migration %03d_%s", migration.number, migration.name)
    return applied_now


def applied_migrations(conn: psycopg.Connection) -> list[int]:
    rows = conn.execute("SELECT number FROM schema_migrations ORDER BY number").fetchall()
    return [r[0] for r in rows]


class DeadlinePassed(PoolTimeout):
    """The request's deadline came before a connection was free: the request ran out of time
    (the API answers 503 ``deadline_exceeded``), which says nothing about the database."""


class DeadlinePool(ConnectionPool):
    """A pool whose waits for a connection end at the request's deadline, and fail fast
    while the database is down.

    ``deadline_var`` is set by the API's admission middleware and copied into the worker
    thread that runs a sync route, so every ``pool.connection()`` on the request path waits
    at most until the request must answer (:class:`DeadlinePassed`, answered 503), never the
    pool's own ``timeout`` after it. Once a connection attempt has failed and no checkout has
    succeeded since, a wait lasts at most ``_FAILING_WAIT_S``: through an outage requests get
    their 503 at once instead of each holding a worker until its deadline. A long wait is
    taken in slices of ``_WAIT_SLICE_S`` so one that began before the outage was noticed is
    cut short too (each slice queues again: only waits over a second, i.e. an exhausted pool,
    lose their place in line).

    Only failed connection attempts mean "down". A wait that merely ran out does not: it used
    to, and that made the pool cut everyone's waits to half a second after one request asked
    for a connection past its deadline (psycopg_pool refuses such a wait at once, even with a
    connection free) while PostgreSQL was fine. The next checkout that had to wait for the
    pool to open a connection (it starts at one and grows on demand; a connection took longer
    than 0.5 s to open on the loaded test machine) then failed: the fuzz suite's one spurious
    503 ``database_unavailable`` (tests/integration/catalog/test_deadline_pool.py).
    """

    _errors_seen = 0

    def getconn(self, timeout: float | None = None) -> psycopg.Connection:
        wait = self.timeout if timeout is None else timeout
        deadline = deadline_var.get()
        by_deadline = deadline is not None and deadline - time.monotonic() < wait
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
        start = time.monotonic()
        end = start + max(0.0, wait)
        while True:
            errors = self.get_stats().get("connections_errors", 0)
            failing = errors > self._errors_seen  # attempts failed since the last checkout
            left = max(0.0, end - time.monotonic())
            try:
                conn: psycopg.Connection = super().getconn(
                    timeout=min(left, _FAILING_WAIT_S if failing else _WAIT_SLICE_S)
                )
            except PoolTimeout:
                if failing or time.monotonic() >= end - 0.001:
                    # the whole wait, as psycopg_pool reports its own, not the last slice's
                    message = f"couldn't get a connection after {time.monotonic() - start:.2f} sec"
                    raise (DeadlinePassed if by_deadline and not failing else PoolTimeout)(message) from None
                continue
            self._errors_seen = errors
            return conn


def open_pool(
    conninfo: str,
    *,
    size: int,
    name: str = "ragline",
    autocommit: bool = False,
    min_size: int = 1,
    timeout_s: float = 30.0,
    statement_timeout_ms: int | None = None,
) -> ConnectionPool:
    """A started connection pool; fails fast with a clear message when the database is down.

    ``autocommit=True`` is for single-statement reads on the request path: each statement is
    its own snapshot and costs one round trip, where a transactional connection adds a BEGIN
    and a COMMIT round trip to every checkout. ``timeout_s`` bounds a wait for a connection
    (and the request's deadline bounds it further, see :class:`DeadlinePool`);
    ``statement_timeout_ms`` is set on every connection so no statement outlives a request.

    Through a PostgreSQL outage the pool recovers by itself: a connection is checked (one
    empty query) when handed out, so one the restart killed is replaced instead of failing a
    request, and the pool's workers reconnect with backoff as long as it is down. The check
    costs a round trip per checkout (~0.1 ms, ``bench/pool_check.py``); checking only
    connections idle for a second made recovery after a restart about a second slower
    (docs/benchmarks.md), so every checkout is checked.
    """
    kwargs: dict[str, object] = {"autocommit": autocommit, "connect_timeout": _CONNECT_TIMEOUT_S}
    if statement_timeout_ms is not None:
        kwargs["options"] = f"-c statement_timeout={statement_timeout_ms}"
    pool = DeadlinePool(
        conninfo,
        min_size=min(min_size, size),
        max_size=size,
        name=name,
        open=False,
        kwargs=kwargs,
        timeout=timeout_s,
        check=_check,
        configure=tracing.trace_connection,  # statement spans, when tracing has them on
        reconnect_timeout=_RECONNECT_S,
    )
    try:
        pool.open(wait=True, timeout=15.0)
    except Exception as exc:  # the pool raises its own timeout; say what was tried
        pool.close()
        raise ConfigError(f"cannot connect to PostgreSQL ({redact(conninfo)}): {exc}") from exc
    return pool


def _check(conn: psycopg.Connection) -> None:
    """The pool's checkout check (one empty query), never a statement span of its own."""
    with tracing.untraced():
        ConnectionPool.check_connection(conn)


def redact(conninfo: str) -> str:
    """The connection string without its password, for messages and logs."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", re.sub(r"password=\S+", "password=***", conninfo))


def create_database(url: str, name: str) -> None:
    """``CREATE DATABASE name`` on the server at ``url`` (``name`` must be a plain identifier)."""
    if not name.isidentifier():
        raise ValueError(f"not a plain database name: {name!r}")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def ping(conn: psycopg.Connection) -> None:
    """One round trip; raises when the server does not answer."""
    conn.execute("SELECT 1")

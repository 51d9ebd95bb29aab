"""Warming the relations a serving node reads, before it serves a version.

Right after a PostgreSQL start or an index build, the result-details fetch
(``catalog.serving.chunk_details``) read its chunks, documents and their primary-key
indexes from disk: p95 350 ms per fetch at 100k chunks against 2.8 ms once cached. Its plan
(EXPLAIN, docs/benchmarks.md) is a nested loop over ``chunks_pkey`` -> ``chunks`` ->
``documents_pkey`` -> ``documents`` (and ``chunks_pkey`` again for the parent), plus the
TOAST tables when texts or metadata are long. Those are what ``prewarm_serving_reads`` loads.

With the ``pg_prewarm`` extension (migration 006) the relations go into shared buffers
(``buffer`` mode) while they fit in half of them, the rest into the OS page cache (``read``
mode): a plain scan of a table larger than a quarter of shared buffers would only cycle a
small ring of buffers. Without the extension (or the privilege) a sequential read of each
table warms the OS page cache at least. Both stop at a deadline so that a huge catalog
cannot hold readiness forever; the caller owns the transaction.

Before reading, :func:`analyze_stale` runs ``ANALYZE`` on each serving table that has changed
more since its last analysis than autovacuum's own threshold allows
(``autovacuum_analyze_threshold + autovacuum_analyze_scale_factor * reltuples``): right after
a bulk load, before autoanalyze has run (it wakes every ``autovacuum_naptime``, a minute by
default), the planner has no statistics and the details fetch plans a scan of every document
of the tenant first: measured p50 52 ms per fetch at 100k chunks instead of 1.3 ms after
``ANALYZE`` (0.35 s), and a first minute of p95 113 ms at 20 req/s (docs/benchmarks.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Literal

import psycopg
from psycopg import sql

# The tables the result-details fetch joins; their primary keys are its index scans.
SERVING_TABLES = ("chunks", "documents")
STEP_BLOCKS = 4096  # 32 MB per pg_prewarm call: the deadline is checked between calls
BUFFER_SHARE = 0.5  # of shared_buffers, at most, filled by warming; the rest goes to the OS cache

_BLOCK_BYTES = 8192  # PostgreSQL's default block size; only for the megabytes reported

WarmMethod = Literal["pg_prewarm", "read"]


@dataclass(frozen=True, slots=True)
class Relation:
    name: str  # as regclass text: "chunks", "chunks_pkey", "pg_toast.pg_toast_16415"
    blocks: int


@dataclass(frozen=True, slots=True)
class WarmResult:
    method: WarmMethod
    relations: int  # relations read, whole or in part
    blocks: int  # blocks read
    total_blocks: int  # blocks of every serving relation
    complete: bool  # False when the deadline stopped it first
    analyzed: tuple[str, ...] = ()  # serving tables whose statistics were stale and were renewed

    @property
    def megabytes(self) -> float:
        return self.blocks * _BLOCK_BYTES / 1e6

    @property
    def total_megabytes(self) -> float:
        return self.total_blocks * _BLOCK_BYTES / 1e6


_RELATIONS = """
WITH t AS (SELECT rel, ord FROM unnest(%s::regclass[]) WITH ORDINALITY AS u(rel, ord)),
toast AS (SELECT c.reltoastrelid AS rel, t.ord FROM pg_class c JOIN t ON c.oid = t.rel
          WHERE c.reltoastrelid <> 0)
SELECT rel::regclass::text, pg_relation_size(rel) / current_setting('block_size')::bigint
FROM (
    SELECT i.indexrelid AS rel, 0 AS rank, t.ord FROM pg_index i JOIN t ON i.indrelid = t.rel
    WHERE i.indisprimary
    UNION ALL SELECT t.rel, 1, t.ord FROM t
    UNION ALL SELECT i.indexrelid, 2, toast.ord FROM pg_index i JOIN toast ON i.indrelid = toast.rel
    UNION ALL SELECT toast.rel, 3, toast.ord FROM toast
) r
ORDER BY rank, ord
"""


def serving_relations(conn: psycopg.Connection) -> list[Relation]:
    """The relations of ``SERVING_TABLES`` the details fetch reads, in warming order:
    primary keys (every lookup walks them), heaps, then TOAST indexes and tables."""
    rows = conn.execute(_RELATIONS, (list(SERVING_TABLES),)).fetchall()
    return [Relation(str(name), int(blocks)) for name, blocks in rows]


def has_pg_prewarm(conn: psycopg.Connection) -> bool:
    return conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_prewarm'").fetchone() is not None


def shared_buffer_blocks(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT setting::bigint FROM pg_settings WHERE name = 'shared_buffers'").fetchone()
    return int(row[0]) if row else 0


# The serving tables whose statistics are older than autovacuum would let them get, among
# those this role may analyze (a non-owner's ANALYZE is a warning that renews nothing).
_STALE = """
SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.relid = ANY(%s::regclass[]) AND pg_has_role(c.relowner, 'USAGE')
  AND s.n_mod_since_analyze > current_setting('autovacuum_analyze_threshold')::float8
      + current_setting('autovacuum_analyze_scale_factor')::float8 * greatest(c.reltuples, 0)
ORDER BY s.relname
"""


def stale_serving_tables(conn: psycopg.Connection) -> list[str]:
    """``SERVING_TABLES`` that autoanalyze is due to analyze and has not yet."""
    return [str(row[0]) for row in conn.execute(_STALE, (list(SERVING_TABLES),)).fetchall()]


def analyze_stale(conn: psycopg.Connection, *, deadline: float) -> tuple[str, ...]:
    """``ANALYZE`` each stale serving table now rather than within autovacuum's next minute.

    Each runs under a ``statement_timeout`` of the time left; one cut off by it leaves the
    rest to autoanalyze, as do tables this role does not own. Returns the tables analyzed.
    """
    done = []
    for table in stale_serving_tables(conn):
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0:
            break
        try:
            with conn.transaction():
                conn.execute("SELECT set_config('statement_timeout', %s, true)", (str(remaining_ms),))
                conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
        except psycopg.errors.QueryCanceled:
            break
        done.append(table)
    return tuple(done)


def prewarm_serving_reads(conn: psycopg.Connection, *, budget_s: float) -> WarmResult:
    """Renew stale statistics, then read the serving relations into shared buffers / the OS
    cache, all within ``budget_s``.

    Raises:
        psycopg.Error: when even the fallback read fails (the caller logs it and serves cold).
    """
    deadline = time.monotonic() + budget_s
    analyzed = analyze_stale(conn, deadline=deadline)
    relations = serving_relations(conn)
    total = sum(r.blocks for r in relations)
    if has_pg_prewarm(conn):
        try:
            with conn.transaction():  # a savepoint: a refused pg_prewarm leaves the fallback usable
                return replace(_pg_prewarm(conn, relations, total, deadline), analyzed=analyzed)
        except psycopg.errors.InsufficientPrivilege:
            pass
    return replace(_plain_read(conn, relations, total, deadline), analyzed=analyzed)


def _pg_prewarm(
    conn: psycopg.Connection, relations: list[Relation], total: int, deadline: float
) -> WarmResult:
    room = int(shared_buffer_blocks(conn) * BUFFER_SHARE)
    done = touched = 0
    for rel in relations:
        mode = "buffer" if done + rel.blocks <= room else "read"
        if rel.blocks:
            touched += 1
        for first in range(0, rel.blocks, STEP_BLOCKS):
            if time.monotonic() >= deadline:
                return WarmResult("pg_prewarm", touched, done, total, complete=False)
            last = min(rel.blocks, first + STEP_BLOCKS) - 1
            conn.execute("SELECT pg_prewarm(%s::regclass, %s, 'main', %s, %s)", (rel.name, mode, first, last))
            done += last - first + 1
    return WarmResult("pg_prewarm", touched, done, total, complete=True)


def _plain_read(
    conn: psycopg.Connection, relations: list[Relation], total: int, deadline: float
) -> WarmResult:
    """A whole-row read of each table (its TOAST too), cut off by ``statement_timeout``."""
    blocks = {r.name: r.blocks for r in relations}
    done = touched = 0
    for table in SERVING_TABLES:
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0:
            return WarmResult("read", touched, done, total, complete=False)
        touched += 1
        try:
            with conn.transaction():
                conn.execute("SELECT set_config('statement_timeout', %s, true)", (str(remaining_ms),))
                conn.execute(
                    sql.SQL("SELECT sum(pg_column_size(t.*)) FROM {} t").format(sql.Identifier(table))
                )
        except psycopg.errors.QueryCanceled:
            return WarmResult("read", touched, done, total, complete=False)
        done += blocks.get(table, 0)
    return WarmResult("read", touched, done, total, complete=True)

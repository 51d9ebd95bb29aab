"""Shard servers heal themselves: a server whose worker process is killed (SIGKILL) under a
query loop is recreated by Ray and reloads its shards of the version the fan-out serves (a
swap made after the first start included) with no operator action. Meanwhile the answers are
``degraded`` (naming the server and its shards), never errors, and hold only the surviving
server's chunks; afterwards they are full again and equal in-process search, and a document
deleted before the kill does not come back with the reload. The time to full answers is printed
(``bench.shard_recovery`` measures it for docs/benchmarks.md)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import psycopg
import pytest

from authz.acl import AclFilter
from catalog import changes as changes_repo
from catalog import documents as docs_repo
from catalog import indexes
from catalog import serving as serving_repo
from core.settings import Settings
from jobs.rebuild_job import rebuild
from jobs.shard_health import ShardServersNotReadyError
from jobs.shard_servers import Holding, ShardFanout, ShardQuery, start_shard_servers
from tests import factories
from tests.integration.jobs.test_shard_servers import (  # noqa: F401 (corpus: the fixture)
    N_SERVERS,
    WORDS,
    Reference,
    _allowed,
    _compare,
    corpus,
)
from wiring.search import shard_server_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MAX_QUERIES = 2_000  # the loop's bound: recovery takes a few seconds of them on two cores
DEADLINE_S = 180.0


def _query(conn: psycopg.Connection, dim: int, n: int) -> ShardQuery:
    """A hybrid query of tenant t1 as ann (group eng) at the current catalog position."""
    vec = np.random.default_rng(n).standard_normal(dim).astype(np.float32)
    words = [WORDS[(n + j * 5) % len(WORDS)] for j in range(3)]
    return ShardQuery(
        acl=AclFilter("t1", frozenset({"user:ann", "group:eng"})),
        position=changes_repo.current_position(conn),
        vector=vec / np.linalg.norm(vec),
        text=" ".join(words),
        k=20,
    )


def test_a_killed_server_is_replaced_and_answers_are_full_again(
    corpus: dict[str, str],  # noqa: F811
    db_url: str,
    tmp_path: Path,
    ray_local: None,
    embedder,
) -> None:
    import ray

    dim = embedder.dim
    ref = Reference(db_url, dim)
    servers = start_shard_servers(shard_server_config(Settings(), db_url, dim=dim), n_servers=N_SERVERS)
    fanout = ShardFanout(servers, timeout_s=30.0, swap_wait_s=60.0)
    try:
        with psycopg.connect(db_url, autocommit=True) as conn:
            # A swap after the start: the replacement must load this version, not the first.
            version = rebuild(db_url, factories.rebuild(tmp_path / "indexes", n_shards=3, force_kind="flat"))
            with conn.transaction():
                indexes.swap_alias(conn, alias="live", version_id=version)
            fanout.await_version(version)
            assert ref.watcher.check_alias(conn) == version
            assert fanout.version == version

            # A deleted document: masked on every server from the position read after it.
            seen = _compare(fanout, ref, conn, 30, seed=21)
            found = serving_repo.chunk_positions(conn, rows=np.array(sorted(seen), dtype=np.int64))
            gone_doc = docs_repo.documents_by_id(conn, doc_ids=[int(found.doc_ids[0])])[0]
            docs_repo.delete_document(conn, tenant_id=gone_doc.tenant_id, external_id=gone_doc.external_id)
            gone = {int(r) for r, d in zip(found.rows, found.doc_ids, strict=True) if d == gone_doc.doc_id}
            assert gone and not _compare(fanout, ref, conn, 30, seed=22) & gone

            old_pid = ray.get(servers[1].pid.remote())
            loaded = ref.state.current.version
            assert loaded is not None
            survivor = {int(r) for p in loaded.shards if p.shard % N_SERVERS == 0 for r in p.row_ids}
            os.kill(old_pid, signal.SIGKILL)
            killed = time.monotonic()
            degraded, full_at, n, slowest = 0, None, 0, 0.0
            while n < MAX_QUERIES and time.monotonic() - killed < DEADLINE_S:
                query = _query(conn, dim, n)
                t = time.monotonic()
                got = fanout.search(query)  # never raises: a missing server degrades the answer
                slowest = max(slowest, time.monotonic() - t)
                n += 1
                hits = got.dense + got.lexical
                assert _allowed(conn, query.acl, hits) and not {h.chunk_id for h in hits} & gone
                if got.degraded:
                    degraded += 1
                    assert all(d["reason"].startswith("server1") for d in got.degraded), got.degraded
                    assert {h.chunk_id for h in hits} <= survivor
                elif degraded:  # full again after the outage
                    full_at = time.monotonic()
                    break
                time.sleep(0.02)
            assert degraded > 0, "the kill was never seen"
            assert full_at is not None, f"no full answer {time.monotonic() - killed:.0f}s after the kill"
            recovery_s = full_at - killed

            new_pid = ray.get(servers[1].pid.remote())
            held: Holding = ray.get(servers[1].holding.remote())
            assert new_pid != old_pid
            assert (held.version_id, held.shards) == (version, (1,))
            assert not _compare(fanout, ref, conn, 50, seed=23) & gone
            print(
                f"\nshard server recovery: SIGKILL of server1 (pid {old_pid}) -> full answers after"
                f" {recovery_s:.2f}s ({degraded} degraded answers of {n} queries); new pid {new_pid},"
                f" slowest answer {slowest:.2f}s, down in the fan-out for {fanout.health.recoveries[-1]:.2f}s"
            )
    finally:
        for server in servers:
            ray.kill(server)
        ref.watcher.close()
        ref.pool.close()


def test_a_swap_that_finds_a_server_gone_is_refused_and_the_old_version_serves(
    corpus: dict[str, str],  # noqa: F811
    db_url: str,
    tmp_path: Path,
    ray_local: None,
    embedder,
) -> None:
    """A server ended for good (``ray.kill`` never restarts): the swap waits its bound, then
    fails with an error naming the server, and the fan-out keeps its version."""
    import ray

    config = shard_server_config(Settings(), db_url, dim=embedder.dim)
    servers = start_shard_servers(config, n_servers=N_SERVERS)
    fanout = ShardFanout(servers, timeout_s=5.0, swap_wait_s=2.0)
    try:
        first = fanout.version
        assert first is not None
        ray.kill(servers[1])
        version = rebuild(db_url, factories.rebuild(tmp_path / "indexes", n_shards=3, force_kind="flat"))
        with psycopg.connect(db_url, autocommit=True) as conn, conn.transaction():
            indexes.swap_alias(conn, alias="live", version_id=version)
        with pytest.raises(ShardServersNotReadyError, match=r"server1: ActorDiedError.*still serving"):
            fanout.await_version(version)
        assert fanout.version == first
    finally:
        for server in servers:
            ray.kill(server)

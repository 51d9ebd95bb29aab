"""Shard servers as Ray actors: for random queries on a flat index the fan-out gives the same ids
and scores as in-process search, nothing outside the caller's ACL comes back (an oracle from
the catalog), a delete and an ACL change are effective from the position the caller read, and
a dead server degrades the answer; each server loads only its shard group (also after a fresh
write and a swap) and the API that fans out loads no shard."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import psycopg
import pytest
from psycopg_pool import ConnectionPool

from authz.acl import AclFilter
from catalog import changes as changes_repo
from catalog import documents as docs_repo
from catalog import indexes
from catalog import jobs as jobs_repo
from catalog import principals as principals_repo
from catalog import serving as serving_repo
from catalog.jobs import NewItem
from core.records import Acl, Hit
from core.settings import Settings
from jobs.rebuild_job import rebuild
from jobs.runner import IngestRunner
from jobs.shard_servers import Holding, ShardFanout, ShardQuery, start_shard_servers
from retrieve.hybrid import HybridSearcher, StageLog, build_masks
from retrieve.serving import ServingIndex, ServingState
from retrieve.watcher import IndexWatcher
from testkit.sizes import size
from tests import factories
from wiring.index import lexical_tokenizer
from wiring.search import planner_config, shard_server_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TENANTS = ("t1", "t2")
USERS = ("user:ann", "user:bob")
GROUPS = ("group:eng", "group:hr")
WORDS = (
    "signing keys rotation vault payroll salary bonus kubernetes pods deploy incident outage budget".split()
)
ACLS = (
    Acl((), True),
    Acl(("group:eng",), False),
    Acl(("user:ann",), False),
    Acl(("group:hr", "user:bob"), False),
)
N_SHARDS, N_SERVERS, K = 4, 2, 10
# Random queries, each compared with in-process search and the oracle. Of the 48 one-chunk
# documents 36 have a reader (t1: ann 24, bob 12; t2: bob 12, ann none), and the suite's 50
# queries (top 10 dense and lexical each) reach all 36, as the printed count shows; the soak
# run sends 200 (and 200 requests through the service).
N_QUERIES = size(50, 200)


class Reference:
    """The in-process searcher over the same catalog and version."""

    def __init__(self, url: str, dim: int) -> None:
        settings = Settings()
        self.pool = ConnectionPool(url, min_size=1, max_size=2, open=True)
        self.state = ServingState(
            model_name=settings.embedding_model, dim=dim, tokenizer=lexical_tokenizer(settings)
        )
        self.watcher = IndexWatcher(self.pool, self.state, alias="live", poll_seconds=1.0)
        self.watcher.start(watch=False)
        self.searcher = HybridSearcher(
            self.state, planner=planner_config(settings), pool=_executor(), stage_timeout_s=30.0
        )

    def search(self, query: ShardQuery) -> tuple[list[Hit], list[Hit]]:
        self.watcher.catch_up_to(query.position)
        snap = self.state.current
        masks = build_masks(self.state, snap, query.acl)
        log = StageLog()
        assert query.vector is not None and query.text is not None
        return (
            self.searcher.dense(snap, masks, query.vector, query.k, log),
            self.searcher.lexical(snap, masks, query.text, query.k, log),
        )


def _executor():
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(max_workers=N_SHARDS)


@pytest.fixture
def corpus(db_url: str, tmp_path: Path, embedder) -> Iterator[dict[str, str]]:
    """48 documents in two tenants with four kinds of ACL, a flat 4-shard version on ``live``."""
    rng = random.Random(7)
    runner = IngestRunner(factories.runner(db_url, tmp_path, use_ray=False), lambda: embedder)
    docs: dict[str, str] = {}
    with psycopg.connect(db_url) as conn:
        for tenant in TENANTS:
            principals_repo.ensure_tenant(conn, tenant_id=tenant)
        principals_repo.replace_groups(conn, tenant_id="t1", principal_id="user:ann", groups=["group:eng"])
        conn.commit()
        items: dict[str, list[NewItem]] = {t: [] for t in TENANTS}
        for n in range(48):
            tenant, ext = TENANTS[n % 2], f"d{n:02d}"
            text = " ".join(rng.choices(WORDS, k=10)) + f" {ext}"
            items[tenant].append(
                NewItem(
                    external_id=ext, mime_type="text/plain", payload=text.encode(), acl=ACLS[n % len(ACLS)]
                )
            )
            docs[ext] = tenant
        jobs = [jobs_repo.create_job(conn, tenant_id=t, kind="ingest", items=items[t]) for t in TENANTS]
        conn.commit()
    for job in jobs:
        assert runner.run_job(job) == "succeeded"
    config = factories.rebuild(tmp_path / "indexes", n_shards=N_SHARDS, force_kind="flat")
    version = rebuild(db_url, config)
    with psycopg.connect(db_url) as conn, conn.transaction():
        indexes.swap_alias(conn, alias="live", version_id=version)
    yield docs


def _readers(conn: psycopg.Connection, tenant: str, user: str) -> frozenset[str]:
    return frozenset({user, *principals_repo.groups_of(conn, tenant_id=tenant, principal_id=user)})


def _allowed(conn: psycopg.Connection, acl: AclFilter, hits: list[Hit]) -> bool:
    """The oracle: every hit is a current chunk of an active document the filter admits."""
    if not hits:
        return True
    pos = serving_repo.chunk_positions(conn, rows=np.array([h.chunk_id for h in hits], dtype=np.int64))
    by_id = {d.doc_id: d for d in docs_repo.documents_by_id(conn, doc_ids=sorted(set(pos.doc_ids.tolist())))}
    for doc_id, version in zip(pos.doc_ids.tolist(), pos.versions.tolist(), strict=True):
        doc = by_id.get(doc_id)
        if doc is None or doc.state != "active" or doc.current_version != version:
            return False
        if doc.tenant_id != acl.tenant_id or not (doc.acl.public or acl.readers & set(doc.acl.principals)):
            return False
    return True


def _same(a: list[Hit], b: list[Hit]) -> bool:
    return [h.chunk_id for h in a] == [h.chunk_id for h in b] and np.allclose(
        [h.score for h in a], [h.score for h in b], rtol=0, atol=1e-6
    )


@pytest.mark.soak
def test_fanout_equals_in_process_and_never_leaks(
    corpus: dict[str, str], db_url: str, ray_local: None, embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    dim = embedder.dim
    ref = Reference(db_url, dim)
    servers = start_shard_servers(shard_server_config(Settings(), db_url, dim=dim), n_servers=N_SERVERS)
    fanout = ShardFanout(servers, timeout_s=30.0)
    rng = np.random.default_rng(3)
    pick = random.Random(3)
    try:
        with psycopg.connect(db_url, autocommit=True) as conn:

            def queries(n: int) -> Iterator[ShardQuery]:
                position = changes_repo.current_position(conn)
                for _ in range(n):
                    tenant, user = pick.choice(TENANTS), pick.choice(USERS)
                    vec = rng.standard_normal(dim).astype(np.float32)
                    yield ShardQuery(
                        acl=AclFilter(tenant, _readers(conn, tenant, user)),
                        position=position,
                        vector=vec / np.linalg.norm(vec),
                        text=" ".join(pick.sample(WORDS, 3)),
                        k=K,
                    )

            timings = {"fanout": 0.0, "in_process": 0.0, "n": 0.0}

            def check(n: int) -> set[int]:
                seen: set[int] = set()
                for query in queries(n):
                    t = time.perf_counter()
                    got = fanout.search(query)
                    timings["fanout"] += time.perf_counter() - t
                    t = time.perf_counter()
                    dense, lexical = ref.search(query)
                    timings["in_process"] += time.perf_counter() - t
                    timings["n"] += 1
                    assert got.degraded == [], got.degraded
                    assert _same(got.dense, dense) and _same(got.lexical, lexical), query
                    assert _allowed(conn, query.acl, got.dense + got.lexical), query.acl
                    seen |= {h.chunk_id for h in got.dense + got.lexical}
                return seen

            seen = check(N_QUERIES)
            assert seen  # the queries found something to compare
            # A query repeated at the same position takes round one's sum from the fan-out's
            # cache (one round sent) and still equals in-process; after the changes below the
            # position moves on, so check(N_QUERIES) there cannot reuse a sum from before them.
            again = next(queries(1))
            first = fanout.search(again)
            rounds: list[int] = []
            real_round = fanout._global_stats

            def counted(*args: Any, **kwargs: Any) -> Any:  # a spy: counts round one, changes nothing
                rounds.append(args[2])
                return real_round(*args, **kwargs)

            monkeypatch.setattr(fanout, "_global_stats", counted)
            second = fanout.search(again)
            assert rounds == []  # round one's sum came from the cache
            assert _same(first.lexical, second.lexical) and _same(second.lexical, ref.search(again)[1])

            # A delete and an ACL change on documents the queries found, then the position read
            # after them: both are effective on every server from that position on.
            found = serving_repo.chunk_positions(conn, rows=np.array(sorted(seen), dtype=np.int64))
            by_id = {
                d.doc_id: d
                for d in docs_repo.documents_by_id(conn, doc_ids=sorted(set(found.doc_ids.tolist())))
            }
            gone, hidden = (by_id[d] for d in sorted(by_id)[:2])
            docs_repo.delete_document(conn, tenant_id=gone.tenant_id, external_id=gone.external_id)
            docs_repo.set_acl(
                conn,
                tenant_id=hidden.tenant_id,
                external_id=hidden.external_id,
                acl=Acl(("user:nobody",), False),
            )
            changed = {
                int(r)
                for r, d in zip(found.rows, found.doc_ids, strict=True)
                if d in (gone.doc_id, hidden.doc_id)
            }
            assert changed
            assert not check(N_QUERIES) & changed
            # The same text at the position after the changes is asked again, never answered
            # with the sum from before them.
            rounds.clear()
            moved = replace(again, position=changes_repo.current_position(conn))
            assert _same(fanout.search(moved).lexical, ref.search(moved)[1])
            assert rounds == [moved.position]

            n = timings["n"]
            print(
                f"\nshard fan-out ({N_SERVERS} servers, {N_SHARDS} flat shards, dense + lexical, k={K}):"
                f" {timings['fanout'] / n * 1000:.2f} ms per request vs"
                f" {timings['in_process'] / n * 1000:.2f} ms in-process, mean of {n:.0f} queries;"
                f" the first {N_QUERIES} reached {len(seen)} chunks"
            )
            ray.kill(servers[1])
            query = next(queries(1))
            got = fanout.search(query)
            reasons = [d["reason"] for d in got.degraded]
            assert len(reasons) == 1 and reasons[0].startswith("server1 failed"), got.degraded
            assert _allowed(conn, query.acl, got.dense + got.lexical)
            version = ref.state.current.version
            assert version is not None
            survivor = {int(r) for p in version.shards if p.shard % N_SERVERS == 0 for r in p.row_ids}
            assert {h.chunk_id for h in got.dense + got.lexical} <= survivor
    finally:
        for server in servers:
            ray.kill(server)
        ref.watcher.close()
        ref.pool.close()


@pytest.mark.soak
def test_search_service_through_shard_servers_answers_as_in_process(
    corpus: dict[str, str], db_url: str, tmp_path: Path, ray_local: None, embedder
) -> None:
    """``RAGLINE_INDEX__SHARD_SERVERS=2``: /v1/retrieve's service gives the in-process results
    (ids and scores) for ``N_QUERIES`` requests, a third in each mode."""
    from retrieve.service import RetrieveRequest
    from wiring import build_search_service

    pool = ConnectionPool(db_url, min_size=1, max_size=4, open=True)
    local, close_local = build_search_service(Settings(data_dir=tmp_path), pool, embedder, watch=False)
    remote_settings = Settings(data_dir=tmp_path, index={"shards": N_SHARDS, "shard_servers": N_SERVERS})
    remote, close_remote = build_search_service(remote_settings, pool, embedder, watch=False)
    pick = random.Random(5)
    try:
        assert remote.shards is not None and local.shards is None
        with psycopg.connect(db_url, autocommit=True) as conn:
            answered = 0
            for n in range(N_QUERIES):
                tenant, user = pick.choice(TENANTS), pick.choice(USERS)
                acl = AclFilter(tenant, _readers(conn, tenant, user))
                mode: Literal["hybrid", "dense", "lexical"] = ("hybrid", "dense", "lexical")[n % 3]
                req = RetrieveRequest(
                    query=" ".join(pick.sample(WORDS, 3)), top_k=K, max_context_tokens=0, mode=mode
                )
                want, got = local.retrieve(req, acl), remote.retrieve(req, acl)
                assert got.degraded == [], got.degraded
                if want.results:  # (t2 has no public documents: ann may read nothing there)
                    answered += 1
                    assert "shards" in got.timings_ms
                assert [r.detail.row for r in got.results] == [r.detail.row for r in want.results]
                assert np.allclose([r.score for r in got.results], [r.score for r in want.results], atol=1e-9)
                for item in got.results:  # the second guard agrees: nothing the caller may not read
                    assert corpus[item.detail.external_id] == tenant
            assert answered >= 3 * N_QUERIES // 10  # 3 of the 4 tenant/user pairs may read something
    finally:
        close_remote()
        close_local()
        pool.close()


def _compare(fanout: ShardFanout, ref: Reference, conn: psycopg.Connection, n: int, seed: int) -> set[int]:
    """``n`` random queries at the current position: the fan-out's lists equal the in-process
    ones and pass the oracle; returns the chunk ids found."""
    dim = ref.state.dim
    rng, pick = np.random.default_rng(seed), random.Random(seed)
    position = changes_repo.current_position(conn)
    seen: set[int] = set()
    for _ in range(n):
        tenant, user = pick.choice(TENANTS), pick.choice(USERS)
        vec = rng.standard_normal(dim).astype(np.float32)
        query = ShardQuery(
            acl=AclFilter(tenant, _readers(conn, tenant, user)),
            position=position,
            vector=vec / np.linalg.norm(vec),
            text=" ".join(pick.sample(WORDS, 3)),
            k=K,
        )
        got = fanout.search(query)
        dense, lexical = ref.search(query)
        assert got.degraded == [], got.degraded
        assert _same(got.dense, dense) and _same(got.lexical, lexical), query
        assert _allowed(conn, query.acl, got.dense + got.lexical), query.acl
        seen |= {h.chunk_id for h in got.dense + got.lexical}
    return seen


def _holdings(servers: list[Any], version_id: str) -> list[Holding]:
    """Each server's holding once all of them serve ``version_id`` (they follow the alias)."""
    import ray

    deadline = time.monotonic() + 60
    while True:
        held: list[Holding] = ray.get([s.holding.remote() for s in servers])
        if all(h.version_id == version_id for h in held) or time.monotonic() > deadline:
            return held
        time.sleep(0.2)


def test_each_server_loads_only_its_shard_group_and_the_api_none(
    corpus: dict[str, str], db_url: str, tmp_path: Path, ray_local: None, embedder
) -> None:
    """Server i loads shards i, i+N, ... of each version (server 0 also the delta) and the API
    that fans out loads none; a fresh write lands in server 0's delta only, a swap to a
    3-shard version re-deals the groups, and the fan-out still equals in-process."""
    from retrieve.service import RetrieveRequest
    from wiring import build_search_service

    ref = Reference(db_url, embedder.dim)
    pool = ConnectionPool(db_url, min_size=1, max_size=4, open=True)
    settings = Settings(
        data_dir=tmp_path, index={"shards": N_SHARDS, "shard_servers": N_SERVERS, "poll_seconds": 0.5}
    )
    remote, close_remote = build_search_service(settings, pool, embedder, watch=False)
    fanout = remote.shards
    assert isinstance(fanout, ShardFanout)
    try:
        with psycopg.connect(db_url, autocommit=True) as conn:
            first = ref.state.current.version_id
            held = _holdings(fanout.servers, first)
            assert [h.shards for h in held] == [(0, 2), (1, 3)]
            assert [h.serves_delta for h in held] == [True, False]
            assert _api_holds_nothing(remote.state.current, N_SHARDS)
            # Status and metrics still describe every shard: the servers are asked for theirs.
            assert remote.state.shard_stats() == []
            assert remote.shard_stats() == ref.state.shard_stats()
            assert [s.shard for s in remote.shard_stats()] == list(range(N_SHARDS))

            # A document written after the build: only server 0 loads it (into its delta).
            runner = IngestRunner(factories.runner(db_url, tmp_path, use_ray=False), lambda: embedder)
            item = NewItem(
                external_id="fresh", mime_type="text/plain", payload=b"vault signing keys fresh", acl=ACLS[0]
            )
            job = jobs_repo.create_job(conn, tenant_id="t1", kind="ingest", items=[item])
            assert runner.run_job(job) == "succeeded"
            assert _compare(fanout, ref, conn, 50, seed=11)
            held = _holdings(fanout.servers, first)
            assert held[0].delta_chunks > 0 and held[1].delta_chunks == 0
            req = RetrieveRequest(query="vault signing keys fresh", top_k=K, max_context_tokens=0)
            got = remote.retrieve(req, AclFilter("t1", frozenset({"user:bob"})))
            assert "fresh" in {r.detail.external_id for r in got.results}
            assert _api_holds_nothing(remote.state.current, N_SHARDS)

            # A swap to a version with another shard count: each server loads its new group.
            version = rebuild(db_url, factories.rebuild(tmp_path / "indexes", n_shards=3, force_kind="flat"))
            with conn.transaction():
                indexes.swap_alias(conn, alias="live", version_id=version)
            assert ref.watcher.check_alias(conn) == version
            assert remote.watcher.check_alias(conn) == version
            held = _holdings(fanout.servers, version)
            assert [h.version_id for h in held] == [version] * N_SERVERS
            assert [h.shards for h in held] == [(0, 2), (1,)]
            assert remote.shard_stats() == ref.state.shard_stats()
            assert _api_holds_nothing(remote.state.current, 3)
            assert _compare(fanout, ref, conn, 100, seed=12)
            print(f"\nshard servers on version {version} (3 flat shards):")
            for i, h in enumerate(held):
                print(
                    f"  server{i}: shards {h.shards}, delta {h.delta_chunks} chunks,"
                    f" RSS {h.rss_bytes / 2**20:.0f} MiB"
                )
    finally:
        close_remote()
        pool.close()
        ref.watcher.close()
        ref.pool.close()


def _api_holds_nothing(snap: ServingIndex, n_shards: int) -> bool:
    """The fanning-out API's snapshot: the manifest (all shards listed) and no shard data."""
    return (
        snap.version is not None
        and len(snap.version.manifest.shards) == n_shards
        and snap.version.shards == ()
        and snap.shard_doc_idx == ()
        and snap.delta.size == 0
    )

"""No leak, ever: random tenants, principals, groups and documents with random ACLs, random
sequences of ingest, re-version, ACL change, group change, delete, rebuild and swap; after
each step, random queries in every mode (with and without rerank and filters) are checked
against an oracle computed from the catalog."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from psycopg_pool import ConnectionPool

from authz.acl import AclFilter, DocumentFilters
from catalog import documents as docs_repo
from catalog import indexes
from catalog import jobs as jobs_repo
from catalog import principals as principals_repo
from catalog.jobs import NewItem
from core.records import Acl
from core.settings import Settings
from jobs.rebuild_job import rebuild
from jobs.runner import IngestRunner
from retrieve.service import RetrieveRequest
from testkit.sizes import size
from tests import factories
from tests.conftest import truncate_all
from wiring import build_search_service

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.soak]

TENANTS = ["t1", "t2"]
USERS = ["user:ann", "user:bob", "user:cy"]
GROUPS = ["group:eng", "group:hr", "group:ops"]
WORDS = (
    "signing keys rotation vault payroll salary bonus lunch menu pasta kubernetes pods deploy "
    "incident outage postmortem budget forecast hiring interview"
).split()
# Random histories of up to 10 steps, each step checked with 30 queries (2 tenants x 3 users x
# 5 modes) against the oracle. Measured: ~9 checked steps per history (1,530 queries from 6,
# 3,330 from 12); the suite's 8 make ~2,200, over twice the thousand asserted below, at both
# query precisions (they alternate), so short histories cannot fail it; the soak run draws 12.
HISTORIES = size(8, 12)
QUERIES = [
    "signing keys rotation",
    "salary bonus payroll",
    "kubernetes deploy outage",
    "lunch pasta",
    "budget forecast hiring",
    "incident postmortem",
]
CHECKS = {"results": 0, "queries": 0}

acls = st.builds(
    lambda ps, pub: Acl(tuple(sorted(set(ps))), pub),
    st.lists(st.sampled_from(USERS + GROUPS), max_size=2),
    st.booleans().map(lambda b: b and False) | st.just(True),
)
texts = st.lists(st.sampled_from(WORDS), min_size=4, max_size=12).map(" ".join)


@pytest.fixture(scope="module")
def world(pg_url: str, tmp_path_factory: pytest.TempPathFactory, embedder, onnx_models):
    from sentence_transformers import CrossEncoder

    from index.embedder import resolve_model_path

    tmp = tmp_path_factory.mktemp("noleak")
    (tmp / "models").symlink_to(onnx_models)  # the int8 query encoder's export, made once
    reranker_dir = tmp / "reranker"
    # A real cross-encoder with an untrained head: scores are arbitrary but the stage runs for real.
    CrossEncoder(resolve_model_path("bundled:all-MiniLM-L6-v2"), num_labels=1).save(str(reranker_dir))
    return {"url": pg_url, "tmp": tmp, "embedder": embedder, "reranker": str(reranker_dir)}


class NoLeak(RuleBasedStateMachine):
    world: dict = {}
    histories = 0

    @initialize()
    def start(self) -> None:
        w = self.world
        truncate_all(w["url"])
        # Every other history serves int8 query vectors (a fast path, under the same oracle).
        NoLeak.histories += 1
        self.settings = Settings(
            data_dir=w["tmp"],
            database_url=w["url"],
            rerank={"model": w["reranker"]},
            embedding_query_precision="int8" if NoLeak.histories % 2 else "fp32",
        )
        self.pool = ConnectionPool(w["url"], min_size=1, max_size=4, open=True)
        self.service, self.close = build_search_service(self.settings, self.pool, w["embedder"], watch=False)
        query_encoder = self.service.embedders.get(self.settings.embedding_model).embedder
        assert getattr(query_encoder, "precision", "fp32") == self.settings.embedding_query_precision
        self.runner = IngestRunner(
            factories.runner(
                conninfo=w["url"],
                model_name=self.settings.embedding_model,
                chunking=factories.chunking(chunk_tokens=64, overlap_tokens=8),
                data_dir=w["tmp"],
                use_ray=False,
            ),
            lambda: w["embedder"],
        )
        self.docs: dict[str, str] = {}  # external id -> tenant
        with psycopg.connect(w["url"]) as conn:
            for t in TENANTS:
                principals_repo.ensure_tenant(conn, tenant_id=t)
        # a base corpus in both tenants with every kind of ACL, so queries have something to find
        for i, acl in enumerate(
            [
                Acl((), True),
                Acl(("group:eng",), False),
                Acl(("user:ann",), False),
                Acl(("group:hr", "user:bob"), False),
                Acl((), True),
                Acl(("group:ops",), False),
            ]
        ):
            for tenant in TENANTS:
                self.ingest(
                    tenant, 2, acl, " ".join(WORDS[i * 3 : i * 3 + 8]), "wiki" if i % 2 else "drive", False
                )

    def teardown(self) -> None:
        if hasattr(self, "close"):
            self.close()
            self.pool.close()

    @rule(
        tenant=st.sampled_from(TENANTS),
        n=st.integers(1, 3),
        acl=acls,
        text=texts,
        meta=st.sampled_from(["wiki", "drive"]),
        reuse=st.booleans(),
    )
    def ingest(self, tenant: str, n: int, acl: Acl, text: str, meta: str, reuse: bool) -> None:
        existing = [d for d, t in self.docs.items() if t == tenant]
        ids = existing[:n] if reuse and existing else [f"d{uuid.uuid4().hex[:6]}" for _ in range(n)]
        items = [
            NewItem(
                external_id=d,
                mime_type="text/plain",
                payload=f"{text} {d}".encode(),
                metadata={"source": meta},
                acl=acl,
            )
            for d in ids
        ]
        with psycopg.connect(self.world["url"]) as conn:
            job = jobs_repo.create_job(conn, tenant_id=tenant, kind="ingest", items=items)
        assert self.runner.run_job(job) == "succeeded"
        for d in ids:
            self.docs[d] = tenant

    @rule(data=st.data(), acl=acls)
    def change_acl(self, data: st.DataObject, acl: Acl) -> None:
        if self.docs:
            doc = data.draw(st.sampled_from(sorted(self.docs)))
            with psycopg.connect(self.world["url"]) as conn:
                try:
                    docs_repo.set_acl(conn, tenant_id=self.docs[doc], external_id=doc, acl=acl)
                except Exception:  # deleted already
                    conn.rollback()

    @rule(
        tenant=st.sampled_from(TENANTS),
        user=st.sampled_from(USERS),
        groups=st.lists(st.sampled_from(GROUPS), max_size=2),
    )
    def change_groups(self, tenant: str, user: str, groups: list[str]) -> None:
        with psycopg.connect(self.world["url"]) as conn:
            principals_repo.replace_groups(conn, tenant_id=tenant, principal_id=user, groups=groups)

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        if self.docs:
            doc = data.draw(st.sampled_from(sorted(self.docs)))
            with psycopg.connect(self.world["url"]) as conn:
                try:
                    docs_repo.delete_document(conn, tenant_id=self.docs[doc], external_id=doc)
                except Exception:  # deleted already
                    conn.rollback()

    @rule()
    def rebuild_and_swap(self) -> None:
        config = factories.rebuild(
            index_root=self.world["tmp"] / "indexes",
            model_name=self.settings.embedding_model,
            n_shards=2,
            dense_overrides={"hnsw_m": 8, "ef_construction": 32},
            flat_max_vectors=4,
        )
        try:
            version = rebuild(self.world["url"], config)
        except ValueError:  # nothing live to index
            return
        with psycopg.connect(self.world["url"]) as conn:
            with conn.transaction():
                indexes.swap_alias(conn, alias="live", version_id=version)
            assert self.service.watcher.check_alias(conn) == version

    @invariant()
    def nothing_leaks(self) -> None:
        if not hasattr(self, "service"):
            return
        for tenant in TENANTS:
            for user in USERS:
                readers = self._readers(tenant, user)
                for mode, rerank, filters in (
                    ("dense", False, None),
                    ("lexical", False, None),
                    ("hybrid", False, None),
                    ("hybrid", True, None),
                    ("hybrid", False, DocumentFilters(sources=frozenset({"wiki"}))),
                ):
                    query = QUERIES[(CHECKS["queries"]) % len(QUERIES)]
                    acl = AclFilter(tenant, frozenset(readers), filters or DocumentFilters())
                    result = self.service.retrieve(
                        RetrieveRequest(
                            query=query,
                            top_k=20,
                            mode=mode,  # type: ignore[arg-type]
                            rerank=rerank,
                            max_context_tokens=200,
                        ),
                        acl,
                    )
                    allowed = self._oracle(tenant, readers, filters)
                    CHECKS["queries"] += 1
                    for r in result.results:
                        CHECKS["results"] += 1
                        assert r.detail.row in allowed, (tenant, user, mode, r.detail.external_id)
                    if not result.degraded and mode != "lexical":  # BM25 only returns term matches
                        assert len(result.results) == min(20, len(allowed)), (mode, tenant, user)

    def _readers(self, tenant: str, user: str) -> set[str]:
        with psycopg.connect(self.world["url"]) as conn:
            return {user, *principals_repo.groups_of(conn, tenant_id=tenant, principal_id=user)}

    def _oracle(self, tenant: str, readers: set[str], filters: DocumentFilters | None) -> set[int]:
        sql = (
            "SELECT c.chunk_row FROM chunks c JOIN documents d ON d.doc_id = c.doc_id"
            " WHERE d.tenant_id = %s AND d.state = 'active' AND c.version = d.current_version AND c.level = 0"
            " AND (d.acl_public OR d.acl_principals && %s::text[])"
        )
        args: list[object] = [tenant, sorted(readers)]
        if filters is not None:
            sql += " AND d.source = ANY(%s)"
            args.append(sorted(filters.sources))
        with psycopg.connect(self.world["url"]) as conn:
            return {r[0] for r in conn.execute(sql, args).fetchall()}


def test_no_leak_under_random_histories(world) -> None:
    NoLeak.world = world
    CHECKS.update(results=0, queries=0)
    runner = NoLeak.TestCase
    runner.settings = settings(
        max_examples=HISTORIES, stateful_step_count=10, deadline=None, suppress_health_check=list(HealthCheck)
    )
    runner().runTest()
    print(
        f"\nno leak: {NoLeak.histories} histories, {CHECKS['queries']} queries, {CHECKS['results']} results"
    )
    # thousands of individual checks per run, not a handful, at both query precisions
    assert CHECKS["queries"] >= 1000 and CHECKS["results"] >= 1000, CHECKS
    assert NoLeak.histories >= 2
    assert (world["tmp"] / "models" / "all-MiniLM-L6-v2-onnx-int8" / "meta.json").is_file()

"""``ragline tune`` through the real pipeline, catalog, index version and SearchService.

The corpus is built so the answer is known: document i holds a made-up word (its token) and a
sentence on topic i; query i is token i plus a paraphrase of topic i+1 (no shared word), and
only document i is relevant. BM25 finds document i by its token alone, the dense model is
drawn to topic i+1: RRF with both legs ranks document i first, the dense leg alone does not.
"""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from authz.acl import AclFilter
from catalog import documents as docs_repo
from catalog import feedback as feedback_repo
from catalog import indexes
from catalog.audit import entries
from catalog.principals import ensure_tenant
from core.errors import InvalidInputError
from core.settings import Settings
from evaluation import tuning
from evaluation.harness import EVAL_READER
from retrieve.service import FusionConfig, RetrieveRequest
from services.caller import Caller
from services.tenants import FusionOverride, fusion_defaults, set_fusion
from wiring import build_search_service
from wiring.search import fusion_config

pytestmark = [pytest.mark.integration]

TOPICS = [
    ("The cat slept on the warm windowsill all afternoon.", "feline napping beside sunny glass"),
    ("Stock markets fell sharply after the interest rate announcement.", "equities plunged following policy"),
    ("The volcano erupted and lava flowed down the mountain.", "magma poured over a peak"),
    ("Our football team won the championship final last night.", "squad triumphed, trophy match yesterday"),
    ("Bake the bread dough in a hot oven for forty minutes.", "cook loaf inside stove"),
    ("The satellite orbits the planet every ninety minutes.", "spacecraft circling earth hourly"),
    (
        "Doctors recommend vaccines to prevent measles in children.",
        "physicians advise shots against disease kids",
    ),
    (
        "The violinist performed a concerto with the symphony orchestra.",
        "fiddler played piece alongside musicians",
    ),
    ("Heavy snowfall closed the highway through the pass.", "blizzard shut motorway"),
    ("The lawyer argued the appeal before the supreme court judges.", "attorney pleaded case to justices"),
    ("Bees collect nectar from flowers to make honey.", "insects gather pollen, produce sweet syrup"),
    ("The programmer fixed a memory leak in the database server.", "coder repaired software bug"),
    ("Farmers harvested wheat and corn before the autumn rains.", "growers reaped grain prior fall showers"),
    ("The museum displays ancient Egyptian mummies and pottery.", "gallery exhibits pharaoh relics"),
    (
        "Whales migrate thousands of miles across the ocean each year.",
        "cetaceans travel vast sea distances annually",
    ),
    ("The chef seasoned the soup with garlic, salt and pepper.", "cook flavoured broth using spices"),
]
TOKENS = [f"zq{chr(97 + i)}xv{chr(107 + i)}orb" for i in range(len(TOPICS))]


def write_collection(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    with (root / "corpus.jsonl").open("w") as out:
        for i, (topic, _) in enumerate(TOPICS):
            out.write(json.dumps({"_id": f"d{i}", "title": "", "text": f"{TOKENS[i]}. {topic}"}) + "\n")
    with (root / "queries.jsonl").open("w") as out:
        for i in range(len(TOPICS)):
            paraphrase = TOPICS[(i + 1) % len(TOPICS)][1]
            out.write(json.dumps({"_id": f"q{i}", "text": f"{TOKENS[i]} {paraphrase}"}) + "\n")
    lines = ["query-id\tcorpus-id\tscore", *(f"q{i}\td{i}\t1" for i in range(len(TOPICS)))]
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture
def collection(tmp_path: Path) -> Path:
    return write_collection(tmp_path / "tokens")


def _settings(tmp_path: Path, url: str) -> Settings:
    return Settings(data_dir=tmp_path / "data", database_url=url)


CALLER = Caller("operator:test", "cli")


def _tune(settings: Settings, tenant: str, collection: Path, embedder, **kw) -> tuning.TuneReport:
    return tuning.tune(
        settings, tenant, CALLER, dataset=collection, folds=4, embedder=embedder, use_ray=False, **kw
    )


def _tune_audits(url: str, tenant: str) -> list[dict]:
    with psycopg.connect(url) as conn:
        return [e.details for e in entries(conn, action="fusion.tune", tenant_id=tenant)]


def test_tune_refuses_without_a_held_out_gain_and_applies_a_clear_one(
    db_url: str, tmp_path: Path, collection: Path, embedder
) -> None:
    settings = _settings(tmp_path, db_url)
    # The server's RRF already ranks every judged document first: nothing can be better.
    kept = _tune(settings, "ta", collection, embedder)
    assert kept.current_ndcg_mean == pytest.approx(1.0)
    assert not kept.applied and kept.ndcg_interval[0] <= 0
    forced = _tune(settings, "ta", collection, embedder, force=True)  # forcing a no-change stores nothing
    assert not forced.applied
    with psycopg.connect(db_url) as conn:
        assert fusion_defaults(conn, tenant_id="ta") is None
    assert [a["applied"] for a in _tune_audits(db_url, "ta")] == [False, False]

    # Tenant "ta" now serves the dense leg alone (lexical weight 0), which misses; "tb" has
    # stored defaults of its own that tuning "ta" must not touch.
    base = build_base(settings)
    with psycopg.connect(db_url) as conn:
        set_fusion(conn, CALLER, tenant_id="ta", defaults=FusionOverride(lexical_weight=0.0), base=base)
        ensure_tenant(conn, tenant_id="tb")
        set_fusion(conn, CALLER, tenant_id="tb", defaults=FusionOverride(rrf_k=33), base=base)
    tuned = _tune(settings, "ta", collection, embedder)
    assert tuned.current_ndcg_mean < 0.9, tuned.current_ndcg_mean
    assert tuned.ndcg_interval[0] > 0 and tuned.applied and not tuned.forced, tuned.reason
    assert tuned.winner["weights"]["lexical"] > 0
    with psycopg.connect(db_url) as conn:
        stored = fusion_defaults(conn, tenant_id="ta")
        assert stored is not None and stored.given() == tuned.winner_override
        assert fusion_defaults(conn, tenant_id="tb") == FusionOverride(rrf_k=33)
    audit = _tune_audits(db_url, "ta")[0]
    assert audit["applied"] is True and audit["fusion"] == tuned.winner_override
    assert audit["interval"] == list(tuned.ndcg_interval) and audit["queries"] == len(TOPICS)
    assert _tune_audits(db_url, "tb") == []


def build_base(settings: Settings) -> FusionConfig:
    return fusion_config(settings)


@pytest.mark.parametrize(
    "override",
    [
        FusionOverride("convex", None, 0.3, 0.7, 20, 30),
        FusionOverride("rrf", 10, 1.0, 0.25, 12, 40),
        FusionOverride("rrf", 60, 0.5, 1.0, 10, 10),
    ],
)
def test_offline_fusion_ranks_as_retrieve_does(
    db_url: str, tmp_path: Path, collection: Path, embedder, override: FusionOverride
) -> None:
    settings = _settings(tmp_path, db_url)
    _tune(settings, "tc", collection, embedder)  # ingests and indexes the collection
    queries = tuning.dataset_queries(collection, "test")
    pool = ConnectionPool(db_url, min_size=1, max_size=2, open=True)
    service, close = build_search_service(settings, pool, embedder, alias="eval", watch=False)
    try:
        gathered = tuning.gather(service, queries, tenant="tc", top_k=10, depth=40)
        acl = AclFilter(tenant_id="tc", readers=frozenset({EVAL_READER}))
        config = service.fusion.merged(override)
        for q, cands in zip(queries, gathered, strict=True):
            request = RetrieveRequest(
                query=q.text, top_k=10, max_context_tokens=0, rerank=False, fusion=override
            )
            served = service.retrieve(request, acl)
            offline = tuning.ranking(cands, config, 10)
            assert [r.detail.row for r in served.results] == [f.chunk_id for f in offline], q.query_id
            assert [r.score for r in served.results] == pytest.approx([f.score for f in offline])
    finally:
        close()
        pool.close()


def test_tune_from_feedback_replays_stored_queries_as_their_principal(
    db_url: str, tmp_path: Path, collection: Path, embedder
) -> None:
    settings = _settings(tmp_path, db_url)
    _tune(settings, "tf", collection, embedder)  # ingests and indexes the collection
    queries = tuning.dataset_queries(collection, "test")
    with psycopg.connect(db_url, autocommit=True) as conn:
        doc = {
            d: docs_repo.get_document(conn, tenant_id="tf", external_id=d).doc_id  # type: ignore[union-attr]
            for d in (f"d{i}" for i in range(len(TOPICS)))
        }
        for i, q in enumerate(queries[:8]):
            # not relevant: a wrong document; graded 2: the right one, after a first grade 1
            _judge(conn, "alice", f"r{i}", doc[f"d{(i + 1) % 16}"], 0, q.text)
            _judge(conn, "alice", f"r{i}", doc[f"d{i}"], 1, q.text)
            _judge(conn, "alice", f"r{i}b", doc[f"d{i}"], 2, q.text)
        # only "not relevant": cannot tell settings apart, skipped; no query kept: not replayable
        _judge(conn, "bob", "r9", doc["d9"], 0, queries[9].text)
        _judge(conn, "bob", "r10", doc["d10"], 1, None)
        judged = tuning.feedback_queries(conn, tenant_id="tf")
        with pytest.raises(InvalidInputError, match="alias 'live'"):
            tuning.tune(settings, "tf", CALLER, from_feedback=True, folds=2, embedder=embedder)
        eval_version = indexes.resolve_alias(conn, alias="eval")
        assert eval_version is not None
        indexes.swap_alias(conn, alias="live", version_id=eval_version.version_id)
        assert tuning.feedback_queries(conn, tenant_id="tc") == []  # another tenant's: none
    assert len(judged) == 8
    assert {q.readers for q in judged} == {frozenset({"alice"})}
    assert {tuple(sorted(q.qrels.values())) for q in judged} == {(0, 2)}
    report = tuning.tune(settings, "tf", CALLER, from_feedback=True, folds=2, embedder=embedder)
    assert report.sources == ["feedback"] and report.queries == 8
    assert report.current_ndcg_mean == pytest.approx(1.0)  # RRF ranks each judged document first
    assert not report.applied


def _judge(
    conn: psycopg.Connection, principal: str, request: str, doc_id: int, grade: int, query: str | None
) -> None:
    feedback_repo.record(
        conn, tenant_id="tf", principal_id=principal, request_id=request, doc_id=doc_id,
        chunk_id=None, grade=grade, query=query,
    )  # fmt: skip

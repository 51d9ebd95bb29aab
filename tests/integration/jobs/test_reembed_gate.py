"""Model migration gates, crash-resume and refusals, on real PostgreSQL and real models."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from catalog import indexes
from catalog import jobs as jobs_repo
from catalog import reembed as reembed_repo
from core.errors import CapacityError, ConflictError
from core.settings import Settings
from jobs.reembed_job import run_reembed
from services.migration import start_reembed
from tests.integration.jobs import reembed_helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]


def _job(url: str, job_id):
    with psycopg.connect(url) as conn:
        return jobs_repo.get_job(conn, job_id=job_id)


def test_random_weights_fail_the_quality_gate_and_the_old_version_keeps_serving(
    db_url: str,
    tmp_path: Path,
    embedder,
    model_variants_dir: dict[str, Path],
) -> None:
    h.ingest(db_url, tmp_path, embedder, "gate", h.topic_docs())
    live = h.build_live(db_url, tmp_path / "indexes")
    dataset = h.write_beir(tmp_path / "beir")
    settings = Settings(
        data_dir=tmp_path, database_url=db_url, reembed={"gate_tenant": "gate", "batch_chunks": 8}
    )
    config = h.migration_config(settings, db_url, model_variants_dir["random"], gate_dataset=str(dataset))
    job_id = start_reembed(db_url, config)
    with pytest.raises(ConflictError):  # one migration at a time
        start_reembed(db_url, config, target_dim=384)
    assert run_reembed(db_url, job_id, config) == "failed"
    job = _job(db_url, job_id)
    gate = job.params["report"]["gate"]
    quality = gate["retrieval_quality"]
    assert quality["passed"] is False and "retrieval_quality" in gate["failed"]
    assert quality["live_ndcg_at_10"] > 0.8  # the bundled model finds every paraphrase
    assert quality["delta"] < -quality["tolerance"]
    assert gate["completeness"]["passed"] and gate["index_quality"]["passed"]
    assert "gate failed" in (job.error or "")
    with psycopg.connect(db_url) as conn:
        assert indexes.resolve_alias(conn, alias="live").version_id == live  # type: ignore[union-attr]
        target = indexes.get_version(conn, version_id=gate["target_version"])
        assert target is not None and target.state == "ready"  # kept for inspection until GC
        assert target.params["gate"]["retrieval_quality"]["delta"] == quality["delta"]
        assert reembed_repo.active_migration(conn) is None  # dual writes stopped


def _titled_docs(url: str, data_dir: Path, embedder, tenant: str) -> None:
    """The topic documents with their paraphrasing query as the title, half of them behind an
    ACL: the label-free structure probes ask each as its own readers."""
    from catalog.jobs import NewItem
    from catalog.principals import ensure_tenant
    from core.records import Acl
    from jobs.runner import IngestRunner
    from tests import factories

    items = [
        NewItem(
            external_id=name,
            mime_type="text/plain",
            payload=text.encode(),
            acl=Acl(("group:eng",), False) if i % 2 else Acl((), True),
            byte_size=len(text),
            title=query,
        )
        for i, (name, text, query) in enumerate(h.TOPICS)
    ]
    with psycopg.connect(url) as conn:
        ensure_tenant(conn, tenant_id=tenant)
        job = jobs_repo.create_job(conn, tenant_id=tenant, kind="ingest", items=items)
    runner = IngestRunner(factories.runner(url, data_dir, use_ray=False), lambda: embedder)
    assert runner.run_job(job) == "succeeded"


@pytest.mark.parametrize(
    ("variant", "outcome", "precision"),
    [("random", "failed", "fp32"), ("cls", "succeeded", "fp32"), ("cls", "succeeded", "int8")],
)
def test_label_free_checks_refuse_random_weights_with_no_gate_dataset(
    variant: str,
    outcome: str,
    precision: str,
    db_url: str,
    tmp_path: Path,
    embedder,
    model_variants_dir: dict[str, Path],
    onnx_models: Path,
) -> None:
    _titled_docs(db_url, tmp_path, embedder, "acme")
    live = h.build_live(db_url, tmp_path / "indexes")
    (tmp_path / "models").symlink_to(onnx_models)  # ONNX exports and int8 copies, made once
    settings = Settings(
        data_dir=tmp_path,
        database_url=db_url,
        reembed={"batch_chunks": 8},
        embedding_query_precision=precision,
    )
    config = h.migration_config(settings, db_url, model_variants_dir[variant])
    assert config.gate.dataset is None and config.gate.query_file is None
    job_id = start_reembed(db_url, config)
    state = run_reembed(db_url, job_id, config)
    gate = _job(db_url, job_id).params["report"]["gate"]
    assert state == outcome, gate["failed"]
    # At int8 both versions' queries ran through int8 copies: the live model's and the target's.
    assert gate["query_precision"] == precision
    if precision == "int8":
        copies = sorted(p.name for p in onnx_models.glob("*-int8") if (p / "meta.json").is_file())
        assert {"all-MiniLM-L6-v2-onnx-int8", "minilm-cls-onnx-int8"} <= set(copies), copies
    assert "retrieval_quality" not in gate  # no gate set: only the label-free checks judged it
    structure, health = gate["structure"], gate["space_health"]
    assert structure["probes"] == len(h.TOPICS)
    assert structure["live_hit_at_10"] == 1.0  # 12 documents: every title finds its own
    assert gate["agreement"]["queries"] == len(h.TOPICS)
    assert health["pairs"] > 0
    with psycopg.connect(db_url) as conn:
        serving = indexes.resolve_alias(conn, alias="live").version_id  # type: ignore[union-attr]
    if outcome == "failed":
        assert "space_health" in gate["failed"] or "structure" in gate["failed"], gate["failed"]
        assert health["target_mean_unrelated_cosine"] > health["live_mean_unrelated_cosine"]
        assert serving == live  # the old version keeps serving
    else:
        assert gate["failed"] == [] and serving == gate["target_version"]


def test_capacity_budget_refuses_with_the_numbers(db_url: str, tmp_path: Path, embedder) -> None:
    h.ingest(db_url, tmp_path, embedder, "acme", h.topic_docs()[:3])
    settings = Settings(data_dir=tmp_path, database_url=db_url, reembed={"ram_budget_bytes": 1000})
    config = h.migration_config(settings, db_url, Path("bundled-variant-not-loaded"))
    with pytest.raises(CapacityError, match=r"RAM \d+ > budget 1000 bytes"):
        start_reembed(db_url, config, target_dim=384)


def test_kill_9_mid_backfill_then_resume_embeds_only_what_is_missing(
    db_url: str,
    tmp_path: Path,
    embedder,
    model_variants_dir: dict[str, Path],
) -> None:
    h.ingest(db_url, tmp_path, embedder, "acme", h.backfill_docs())
    h.build_live(db_url, tmp_path / "indexes")
    model = str(model_variants_dir["cls"])
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "RAGLINE_DATABASE_URL": db_url,
        "RAGLINE_DATA_DIR": str(tmp_path),
        "RAGLINE_REEMBED__BATCH_CHUNKS": "2",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "reembed", "--model", model, "--wait", "--no-ray"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    killed = h.kill_mid_backfill(db_url, proc, model, timeout_s=180)
    settings = Settings(data_dir=tmp_path, database_url=db_url)
    config = h.migration_config(settings, db_url, Path(model))
    assert run_reembed(db_url, killed.job_id, config, force_claim=True) == "succeeded"
    h.assert_resumed(db_url, model, killed, _job(db_url, killed.job_id).params["report"])


def test_scheduled_rebuild_waits_for_a_running_migration(db_url: str, tmp_path: Path, embedder) -> None:
    from services.maintenance import tick
    from tests import factories

    h.ingest(db_url, tmp_path, embedder, "acme", h.topic_docs()[:3])
    with psycopg.connect(db_url) as conn:
        job_id = jobs_repo.create_job(conn, tenant_id="acme", kind="reembed", items=[])
        reembed_repo.start_migration(
            conn, job_id=job_id, model="/models/next", live_model="bundled:all-MiniLM-L6-v2"
        )
        conn.commit()
    config = factories.rebuild(tmp_path / "indexes", model_name="bundled:all-MiniLM-L6-v2")
    result = tick(db_url, config, factories.policy())
    assert result.ran and result.rebuilt is None
    assert any(r.startswith("deferred: migration") for r in result.reasons)
    with psycopg.connect(db_url) as conn:
        assert indexes.list_versions(conn) == []

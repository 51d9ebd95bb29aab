"""Starting a model migration is one operation (``services.migration.start_reembed``):
``POST /v1/admin/reembed`` and ``ragline reembed`` record ``reembed.start`` with one shape,
differing only in who asked (``actor``, ``via``) and the tenant the job is filed under."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.services import reembed_hook
from catalog import audit, indexes
from catalog import jobs as jobs_repo
from catalog import reembed as reembed_repo
from cli.main import main
from cli.output import operator
from core.settings import Settings, get_settings
from tests.integration.api.conftest import make_key
from tests.integration.jobs import reembed_helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _settings(db_url: str, tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, database_url=db_url, reembed={"batch_chunks": 8, "use_ray": False})


@pytest.fixture
def cli_env(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("RAGLINE_DATABASE_URL", db_url)
    monkeypatch.setenv("RAGLINE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RAGLINE_EMBEDDING_BACKEND", "torch")  # no ONNX export per test
    monkeypatch.setenv("RAGLINE_EMBEDDING_DEVICE", "cpu")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def _finished(db_url: str, job_id: uuid.UUID, timeout_s: float = 300) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with psycopg.connect(db_url) as conn:
            job = jobs_repo.get_job(conn, job_id=job_id)
        if job is not None and job.state not in ("queued", "running"):
            return job.state
        time.sleep(0.2)
    raise AssertionError(f"migration {job_id} did not finish")


def test_api_and_cli_start_a_migration_with_one_audit_shape(
    db_url: str,
    tmp_path: Path,
    embedder,
    model_variants_dir: dict[str, Path],
    cli_env: None,
) -> None:
    h.ingest(db_url, tmp_path, embedder, "acme", h.topic_docs())
    h.build_live(db_url, tmp_path / "indexes")
    settings = _settings(db_url, tmp_path)
    auth = {"Authorization": f"Bearer {make_key(db_url, 'acme', ['operator'], principal='service:ops')}"}
    body = {"model": str(model_variants_dir["cls"].resolve()), "index_kind": "flat"}

    with TestClient(create_app(settings, hooks=[])) as slim:  # no migration worker here
        refused = slim.post("/v1/admin/reembed", json=body, headers=auth)
    assert refused.status_code == 503, refused.text
    with psycopg.connect(db_url) as conn:
        assert reembed_repo.active_migration(conn) is None  # nothing was started

    with TestClient(create_app(settings, hooks=[reembed_hook])) as client:
        started = client.post("/v1/admin/reembed", json=body, headers=auth)
        assert started.status_code == 202, started.text
        _finished(db_url, uuid.UUID(started.json()["job_id"]))
    with psycopg.connect(db_url) as conn:
        live = indexes.resolve_alias(conn, alias="live")
    assert live is not None
    # another model from the command line, run here to its end (its gate's verdict aside)
    target = str(model_variants_dir["proj256"].resolve())
    assert main(["reembed", "--model", target, "--wait", "--no-ray"]) in (0, 1)

    with psycopg.connect(db_url) as conn:
        entries = audit.entries(conn, action="reembed.start")
    by_via = {r.details["via"]: r for r in entries}
    assert sorted(by_via) == ["api", "cli"]
    assert len({frozenset(r.details) for r in entries}) == 1, [r.details for r in entries]
    api, cli = by_via["api"], by_via["cli"]
    assert (api.actor, api.tenant_id, api.target) == ("service:ops", "acme", body["model"])
    assert api.details["job_id"] == started.json()["job_id"]
    assert api.details["from"] == "bundled:all-MiniLM-L6-v2" and api.details["index_kind"] == "flat"
    assert (cli.actor, cli.tenant_id, cli.target) == (operator(), "ops", target)
    assert cli.details["from"] == live.embedding_model

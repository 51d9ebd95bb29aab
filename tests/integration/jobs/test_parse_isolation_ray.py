"""The Ray prepare actors parse on their own rlimit'd workers: a PDF bomb fails alone."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import psycopg
import pytest

from catalog import jobs as jobs_repo
from catalog.jobs import NewItem
from catalog.principals import ensure_tenant
from core.records import Acl
from jobs.runner import IngestRunner
from tests import factories, hostile_factory

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_memory_bomb_fails_alone_on_the_ray_path(db_url: str, tmp_path: Path, ray_local: None) -> None:
    with psycopg.connect(db_url) as conn:
        ensure_tenant(conn, tenant_id="raybomb")
        items = [
            NewItem(
                external_id=f"n{i}", mime_type="text/plain", payload=f"Pump seal notes {i}.".encode() * 30
            )
            for i in range(3)
        ]
        # 64 MiB of one PDF string from 70 KB: ~1.8 GB inside MuPDF without a limit.
        items.insert(
            1,
            NewItem(external_id="bomb", mime_type="application/pdf", payload=hostile_factory.string_bomb(64)),
        )
        items = [dataclasses.replace(i, acl=Acl((), True)) for i in items]
        job_id = jobs_repo.create_job(conn, tenant_id="raybomb", kind="ingest", items=items)
    config = factories.runner(
        conninfo=db_url,
        data_dir=tmp_path,
        inline_max_documents=0,
        use_ray=True,
        embed_actors=1,
        batch_documents=4,
        embedding=factories.embedding(backend="torch"),  # no ONNX export in the test
    )
    config = dataclasses.replace(config, isolation=dataclasses.replace(config.isolation, memory_mb=512))
    assert config.isolation.enabled  # the default
    runner = IngestRunner(config, lambda: pytest.fail("the Ray path must not load an in-process embedder"))
    assert runner.run_job(job_id) == "partially_failed"
    with psycopg.connect(db_url) as conn:
        assert [
            (i.external_id, i.error_code) for i in jobs_repo.items(conn, job_id=job_id, state="failed")
        ] == [("bomb", "parse_memory_limit")]
        done = jobs_repo.items(conn, job_id=job_id, state="succeeded")
        assert sorted(i.external_id for i in done) == ["n0", "n1", "n2"]

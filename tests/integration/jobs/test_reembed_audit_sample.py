"""Gate step 4 from the audit log: with ``audit.store_query_text`` on and no query file, the
last distinct retrieves are answered by both versions, each as its own principal."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from api.app import ServiceHook, create_app
from api.services import audit_hook, search_hook
from authz.acl import AclFilter
from catalog import audit
from catalog import jobs as jobs_repo
from catalog.principals import ensure_principal, replace_groups
from core.records import Acl
from core.settings import Settings
from jobs.reembed_gate import SearchOpener
from jobs.reembed_job import run_reembed
from services.migration import start_reembed
from tests.integration.api.conftest import make_key
from tests.integration.jobs import reembed_helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SECRET = "classified orbital launch codes for the comet probe"
QUERIES = {  # principal -> the texts it sends (one repeated: the sample takes distinct ones)
    "user:a": ["comet probe launch", "comet probe launch", "volcano eruption"],
    "user:b": ["comet probe launch"],
}


class _Recorder:
    """Delegates to the real search service and keeps each call's ACL and returned documents."""

    def __init__(self, inner: Any, calls: list[tuple[AclFilter, list[str]]]) -> None:
        self.inner, self.calls = inner, calls

    def retrieve(self, request: Any, acl: AclFilter, **kw: Any) -> Any:
        result = self.inner.retrieve(request, acl, **kw)
        self.calls.append((acl, [r.detail.external_id for r in result.results]))
        return result


def _recording(opener: SearchOpener, calls: list[tuple[AclFilter, list[str]]]) -> SearchOpener:
    @contextmanager
    def open_version(version_id: str) -> Iterator[Any]:
        with opener(version_id) as service:
            yield _Recorder(service, calls)

    return open_version


def _wait_for_audited(db_url: str, n: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with psycopg.connect(db_url) as conn:
            if len(audit.entries(conn, action="retrieve", limit=n + 1)) >= n:
                return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {n} retrieves reached the audit log")


def test_audited_queries_are_answered_as_their_own_principals(
    db_url: str, tmp_path: Path, embedder, model_variants_dir: dict[str, Path]
) -> None:
    docs = h.topic_docs() + [("secret", SECRET, Acl(("group:x",), False))]
    h.ingest(db_url, tmp_path, embedder, "acme", docs)
    h.build_live(db_url, tmp_path / "indexes")
    with psycopg.connect(db_url) as conn:
        for user in QUERIES:
            ensure_principal(conn, tenant_id="acme", principal_id=user)
        replace_groups(conn, tenant_id="acme", principal_id="user:a", groups=["group:x"])
        conn.commit()
    settings = Settings(
        data_dir=tmp_path,
        database_url=db_url,
        index={"poll_seconds": 0.2, "maintenance_seconds": 0},
        audit={"store_query_text": True, "flush_ms": 20},
        reembed={"batch_chunks": 8, "query_sample": 10},
    )
    hooks: list[ServiceHook] = [partial(search_hook, embedder=embedder), audit_hook]
    sent = 0
    with TestClient(create_app(settings, hooks=hooks)) as client:
        with psycopg.connect(db_url) as conn:
            client.app.state.search.watcher.check_alias(conn)  # type: ignore[attr-defined]
        for user, texts in QUERIES.items():
            auth = {"Authorization": f"Bearer {make_key(db_url, 'acme', ['query'], principal=user)}"}
            for text in texts:
                r = client.post("/v1/retrieve", json={"query": text, "top_k": 10}, headers=auth)
                assert r.status_code == 200, r.text
                sent += 1
            filtered = {"query": "secret codes", "top_k": 5, "filters": {"source": ["elsewhere"]}}
            assert client.post("/v1/retrieve", json=filtered, headers=auth).status_code == 200
            sent += 1
        _wait_for_audited(db_url, sent)

    calls: list[tuple[AclFilter, list[str]]] = []
    config = h.migration_config(settings, db_url, model_variants_dir["cls"])
    assert config.gate.query_file is None and config.gate.audit_queries
    config = replace(config, open_search=_recording(config.open_search, calls))
    job_id = start_reembed(db_url, config)
    assert run_reembed(db_url, job_id, config) == "succeeded"

    with psycopg.connect(db_url) as conn:
        job = jobs_repo.get_job(conn, job_id=job_id)
    assert job is not None
    sample = job.params["report"]["gate"]["query_sample"]
    # Distinct (principal, text): user:a's two texts and user:b's one; each principal's filtered
    # query is skipped, not answered with a wider view.
    assert sample["source"] == "audit_log"
    assert sample["queries"] == 3 and sample["skipped_with_filters"] == 2
    assert 0.0 < sample["mean_top10_overlap"] <= 1.0  # CLS pooling still finds the same topics
    assert 0.0 <= sample["min_top10_overlap"] <= sample["mean_top10_overlap"]
    # Both versions answered each sample query with exactly its principal's ACL, groups read now.
    acls = {(acl.tenant_id, acl.readers) for acl, _ in calls}
    assert acls == {("acme", frozenset({"user:a", "group:x"})), ("acme", frozenset({"user:b"}))}
    assert len(calls) == 2 * sample["queries"]
    for acl, found in calls:
        if "group:x" not in acl.readers:
            assert "secret" not in found  # user:b never sees the group's document
    assert any("secret" in found for acl, found in calls if "group:x" in acl.readers)
    # Only numbers are reported: no query text, principal or document id.
    text = json.dumps(job.params["report"])
    for words in [SECRET, "user:a", "user:b", *{t for ts in QUERIES.values() for t in ts}]:
        assert words not in text

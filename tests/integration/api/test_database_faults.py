"""Database faults on the query path: a backend killed mid-query and a statement stuck behind
a lock both end in 503 + Retry-After (never a 500, never a hang), and the next request is
served again without a restart (the pool replaces the dead connection)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from starlette import testclient

from api.app import ServiceHook, create_app
from api.services import ingest_hook, search_hook
from tests.integration.api.conftest import full_settings, make_key, wait_job

# The TestClient's responses: httpx2's where it is installed (starlette prefers it), else httpx's.
Response = testclient.httpx.Response

pytestmark = pytest.mark.integration

DOCS = [
    {
        "external_id": f"n{i}",
        "text": f"Standby promotion runbook, step {i}: check replication lag.",
        "acl": {"public": True},
    }
    for i in range(3)
]
QUERY = {"query": "standby promotion replication lag", "top_k": 3}


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def client(db_url: str, tmp_path: Path, embedder) -> Iterator[TestClient]:
    settings = full_settings(db_url, tmp_path, api={"request_timeout_ms": 3000})
    hooks: list[ServiceHook] = [
        partial(ingest_hook, embedder=embedder),
        partial(search_hook, embedder=embedder),
    ]
    with TestClient(create_app(settings, hooks=hooks)) as c:
        yield c


def _ingested(client: TestClient, db_url: str) -> str:
    ingest = make_key(db_url, "acme", ["ingest"])
    query = make_key(db_url, "acme", ["query"], principal="user:alice")
    r = client.post("/v1/documents", json={"documents": DOCS}, headers=_auth(ingest))
    assert r.status_code == 202, r.text
    assert wait_job(client, ingest, r.json()["job_id"])["state"] == "succeeded"
    r = client.post("/v1/retrieve", json=QUERY, headers=_auth(query))
    assert r.status_code == 200 and r.json()["results"], r.text
    return query


def _retrieve_behind_lock(client: TestClient, db_url: str, token: str, *, kill: bool) -> Response:
    """Hold an exclusive lock on ``chunks`` so the result-details read waits; with ``kill``,
    terminate that backend mid-query, else let the statement timeout end it."""
    replies: list[Response] = []
    with psycopg.connect(db_url) as locker:
        locker.execute("LOCK TABLE chunks IN ACCESS EXCLUSIVE MODE")
        worker = threading.Thread(
            target=lambda: replies.append(client.post("/v1/retrieve", json=QUERY, headers=_auth(token)))
        )
        worker.start()
        if kill:
            with psycopg.connect(db_url, autocommit=True) as admin:
                for _ in range(200):
                    row = admin.execute(
                        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND query LIKE '%%FROM chunks c JOIN documents d%%'"
                    ).fetchone()
                    if row is not None:
                        admin.execute("SELECT pg_terminate_backend(%s)", (row[0],))
                        break
                    time.sleep(0.05)
                else:
                    pytest.fail("the result-details read never waited on the lock")
        worker.join(timeout=60)
        locker.rollback()
    assert replies, "the request did not answer"
    return replies[0]


def test_a_backend_killed_mid_query_is_a_503_and_the_pool_recovers(client: TestClient, db_url: str) -> None:
    token = _ingested(client, db_url)
    r = _retrieve_behind_lock(client, db_url, token, kill=True)
    assert r.status_code == 503, r.text  # AdminShutdown, not a 500
    assert r.headers["retry-after"] == "1" and r.json()["error"]["code"] == "database_unavailable"
    again = client.post("/v1/retrieve", json=QUERY, headers=_auth(token))
    assert again.status_code == 200 and again.json()["results"], again.text


def test_a_statement_stuck_behind_a_lock_ends_in_a_503(client: TestClient, db_url: str) -> None:
    token = _ingested(client, db_url)
    r = _retrieve_behind_lock(client, db_url, token, kill=False)
    assert r.status_code == 503, r.text  # the read pool's statement_timeout (80% of the deadline)
    assert r.headers["retry-after"] == "1" and r.json()["error"]["code"] == "database_unavailable"
    again = client.post("/v1/retrieve", json=QUERY, headers=_auth(token))
    assert again.status_code == 200 and again.json()["results"], again.text

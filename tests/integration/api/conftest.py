from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from api.app import ServiceHook, create_app
from api.services import audit_hook, ingest_hook, search_hook
from authz.api_keys import create_key
from catalog import indexes
from core.settings import Settings


@pytest.fixture
def foundation_client(db_url: str, tmp_path: Path) -> Iterator[TestClient]:
    """The API with only the foundation services (no models, no indexes)."""
    settings = Settings(data_dir=tmp_path, database_url=db_url)
    with TestClient(create_app(settings, hooks=[])) as client:
        yield client


@pytest.fixture(scope="module")
def foundation_client_shared(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """One foundation API for the whole module, for tests that only need a running app (input
    checks, error shapes): each test still starts on an emptied catalog (``db_url``) with keys of
    its own, and none may change the app (routes, pools, settings): those take
    ``foundation_client``, which builds an app per test."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("foundation-shared"), database_url=pg_url)
    with TestClient(create_app(settings, hooks=[])) as client:
        yield client


@pytest.fixture(scope="module")
def full_client_shared(
    pg_url: str, tmp_path_factory: pytest.TempPathFactory, embedder
) -> Iterator[TestClient]:
    """``full_client`` once per module, for tests that send requests no index answers (bad
    bodies, refused parameters) and push nothing: the catalog is emptied under it before each
    test (``db_url``), so a test that ingests or reads an index takes ``full_client``."""
    yield from serving_client(full_settings(pg_url, tmp_path_factory.mktemp("full-shared")), embedder)


def full_settings(db_url: str, tmp_path: Path, **overrides: object) -> Settings:
    return Settings(data_dir=tmp_path, database_url=db_url, **overrides)  # type: ignore[arg-type]


@pytest.fixture
def full_client(db_url: str, tmp_path: Path, embedder) -> Iterator[TestClient]:
    """The whole API (ingest runner without Ray, search service) on the session's model."""
    yield from serving_client(full_settings(db_url, tmp_path), embedder)


def serving_client(settings: Settings, embedder, *, audit: bool = False) -> Iterator[TestClient]:
    """``full_client`` with other settings (use it as a fixture body: ``yield from``), and with
    the retrieve audit writer where ``audit``."""
    hooks: list[ServiceHook] = [
        *([audit_hook] if audit else []),
        partial(ingest_hook, embedder=embedder),
        partial(search_hook, embedder=embedder),
    ]
    app = create_app(settings, hooks=hooks)
    with TestClient(app) as client:
        client.app.state.runner.config = _no_ray(client.app.state.runner.config)  # type: ignore[attr-defined]
        yield client


def _no_ray(config):
    import dataclasses

    return dataclasses.replace(config, use_ray=False)


def make_key(
    db_url: str, tenant: str, roles: list[str], principal: str | None = None, delegate: bool = False
) -> str:
    with psycopg.connect(db_url) as conn:
        return create_key(
            conn, tenant_id=tenant, roles=roles, principal_id=principal, can_delegate=delegate
        ).token


def wait_job(client: TestClient, token: str, job_id: str, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {token}"}).json()
        if job["state"] not in ("queued", "running"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish in {timeout}s")


def push_and_wait(client: TestClient, token: str, docs: list[dict]) -> dict:
    """Push ``docs`` and wait for their job; asserts it was accepted and succeeded, returns it."""
    resp = client.post(
        "/v1/documents", json={"documents": docs}, headers={"Authorization": f"Bearer {token}"}
    )
    assert resp.status_code in (200, 202), resp.text
    job = wait_job(client, token, resp.json()["job_id"])
    assert job["state"] == "succeeded", job
    return job


def swap_live(db_url: str, client: TestClient, version: str) -> str | None:
    """Point ``live`` at ``version`` and have the client's search service check the alias now;
    returns the version it serves after the check (None: it refused the version).

    The service's own watcher thread, woken by the swap's NOTIFY, may take the version first:
    then this check finds nothing to do, and the answer is what the node serves once that
    thread's load ends (a refusal is recorded in ``last_swap_error``)."""
    watcher = client.app.state.search.watcher  # type: ignore[attr-defined]
    with psycopg.connect(db_url) as conn:
        with conn.transaction():
            indexes.swap_alias(conn, alias="live", version_id=version)
        swapped: str | None = watcher.check_alias(conn)
    deadline = time.monotonic() + 30
    while swapped is None and time.monotonic() < deadline:
        if watcher.state.current.version_id == version:
            return version
        if watcher.last_swap_error is not None and watcher.last_swap_error.startswith(version):
            return None
        time.sleep(0.05)
    return swapped

"""A real ragline server on a loopback port (uvicorn in a thread, the full app on the
session's model, PostgreSQL), so the client is tested over real HTTP: ``live_server`` is a
test's own on a clean catalog; ``live_tenant`` is a tenant of the test's own on one server
per module (``live_server_module``), for tests that need no clean catalog."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

import httpx
import psycopg
import pytest

from api.app import ServiceHook, create_app
from api.services import ingest_hook, search_hook
from ragline_client import Connector, DocumentIn, FileDocument, Item, Linked
from testkit.server import app_in_thread
from tests.conftest import truncate_all
from tests.integration.api.conftest import full_settings, make_key


@dataclass(frozen=True, slots=True)
class LiveServer:
    url: str
    db_url: str
    tenant: str = "acme"  # the tenant of ``key`` and ``versions`` unless they name another

    def key(self, *roles: str, tenant: str | None = None, principal: str | None = None) -> str:
        return make_key(self.db_url, tenant or self.tenant, list(roles), principal=principal)

    def versions(self, external_id: str, tenant: str | None = None) -> int:
        """How many versions the catalog holds of a document (a duplicate push adds one)."""
        with psycopg.connect(self.db_url) as conn:
            row = conn.execute(
                "SELECT count(v.*) FROM documents d JOIN document_versions v USING (doc_id)"
                " WHERE d.tenant_id = %s AND d.external_id = %s",
                (tenant or self.tenant, external_id),
            ).fetchone()
        return int(row[0]) if row else 0


class CountingTransport(httpx.HTTPTransport):
    """A real transport that records ``METHOD path`` of every request it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(f"{request.method} {request.url.path}")
        return super().handle_request(request)

    def writes(self) -> list[str]:
        return [s for s in self.sent if not s.startswith("GET ")]


def _serve(db_url: str, data_dir: Path, embedder) -> Iterator[LiveServer]:
    # A batch limit of 2 makes a 3-document push take two batches.
    settings = full_settings(db_url, data_dir, api={"max_batch_documents": 2})
    hooks: list[ServiceHook] = [
        partial(ingest_hook, embedder=embedder),
        partial(search_hook, embedder=embedder),
    ]
    app = create_app(settings, hooks=hooks)
    with app_in_thread(app) as url:
        runner = app.state.runner
        runner.config = dataclasses.replace(runner.config, use_ray=False)
        yield LiveServer(url=url, db_url=db_url)


@pytest.fixture
def live_server(db_url: str, tmp_path: Path, embedder) -> Iterator[LiveServer]:
    """A server of the test's own on a clean catalog (tenant ``acme``)."""
    yield from _serve(db_url, tmp_path, embedder)


@pytest.fixture(scope="module")
def live_server_module(
    pg_url: str, tmp_path_factory: pytest.TempPathFactory, embedder
) -> Iterator[LiveServer]:
    """One server for the module, on a catalog emptied once before it: a test takes
    ``live_tenant`` (and not ``db_url``, whose emptying would pull the catalog from under it)."""
    truncate_all(pg_url)
    yield from _serve(pg_url, tmp_path_factory.mktemp("live-server"), embedder)


_TENANTS = itertools.count(1)


@pytest.fixture
def live_tenant(live_server_module: LiveServer) -> LiveServer:
    """``live_server_module`` as a tenant of this test's own: no document, key, principal or
    connector state of another test is visible to it."""
    return dataclasses.replace(live_server_module, tenant=f"tenant{next(_TENANTS)}")


ConnectorT = TypeVar("ConnectorT", bound=Connector)


def dies_after(connector: ConnectorT, loads: int) -> ConnectorT:
    """Fault injection: ``connector`` dies (KeyboardInterrupt, as a killed process would) when it
    starts loading its item number ``loads + 1``."""
    load, count = connector.load, itertools.count(1)

    def dying_load(item: Item) -> DocumentIn | FileDocument | Linked:
        if next(count) > loads:
            raise KeyboardInterrupt
        return load(item)

    connector.load = dying_load  # type: ignore[method-assign]
    return connector

"""The retrieve request model's limits come from the settings the app is built with."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.schemas import RetrieveOut
from authz.acl import AclFilter
from catalog.serving import ChunkDetail
from core.settings import Settings
from retrieve.packing import Citation, PackedContext
from retrieve.service import ResultItem, RetrieveRequest, RetrieveResult
from tests.integration.api.conftest import make_key

pytestmark = pytest.mark.integration


class StubSearch:
    """Records the requests the route builds and answers one fixed result."""

    def __init__(self) -> None:
        self.requests: list[RetrieveRequest] = []

    def readiness(self) -> str:
        return "ok"

    def retrieve(self, req: RetrieveRequest, acl: AclFilter, *, catalog_position: int) -> RetrieveResult:
        self.requests.append(req)
        detail = ChunkDetail(
            row=0,
            chunk_id="c1",
            doc_id=1,
            external_id="doc-1",
            title="Doc",
            text="glaciers carve valleys",
            char_start=0,
            char_end=22,
            page_start=2,
            page_end=3,
            section_path=("Intro",),
            metadata={"source": "wiki", "year": 2024, "tags": ["a", "b"]},
            parent_text=None,
            parent_char_start=None,
            parent_char_end=None,
        )
        context = PackedContext(
            text="glaciers carve valleys",
            token_count=4,
            citations=(Citation(0, 22, (0,), "doc-1", 0, 22),),
            truncated=False,
            notes=(),
        )
        return RetrieveResult(
            results=[ResultItem(detail, 0.5, {"dense": 0.9, "lexical": 1.5})],
            context=context,
            index_version="delta-only",
            embedding_model="bundled:all-MiniLM-L6-v2",
            timings_ms={"embed": 1.0},
            degraded=[{"stage": "rerank", "reason": "timeout"}],
        )


def _client(db_url: str, tmp_path: Path, **overrides: Any) -> Iterator[tuple[TestClient, StubSearch, dict]]:
    settings = Settings(data_dir=tmp_path, database_url=db_url, **overrides)
    with TestClient(create_app(settings, hooks=[])) as client:
        stub = StubSearch()
        client.app.state.search = stub  # type: ignore[attr-defined]
        headers = {"Authorization": f"Bearer {make_key(db_url, 'acme', ['query'])}"}
        yield client, stub, headers


def _status(client: TestClient, headers: dict, path: str = "/v1/retrieve", **body: object) -> int:
    return client.post(path, json=body, headers=headers).status_code


@pytest.fixture
def limited(db_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, StubSearch, dict]]:
    yield from _client(
        db_url,
        tmp_path,
        api={"max_top_k": 5, "max_query_chars": 40},
        retrieve={"max_context_tokens": 300, "default_context_tokens": 200},
    )


def test_top_k_follows_api_max_top_k(limited: tuple[TestClient, StubSearch, dict]) -> None:
    client, stub, headers = limited
    assert _status(client, headers, query="q", top_k=6) == 422
    assert _status(client, headers, query="q", top_k=5) == 200
    # The default follows a lowered maximum (8 would exceed 5).
    assert _status(client, headers, query="q") == 200
    assert [r.top_k for r in stub.requests] == [5, 5]


def test_query_length_follows_api_max_query_chars(limited: tuple[TestClient, StubSearch, dict]) -> None:
    client, _, headers = limited
    assert _status(client, headers, query="x" * 41) == 422
    assert _status(client, headers, query="x" * 40) == 200


def test_context_tokens_follow_retrieve_settings(limited: tuple[TestClient, StubSearch, dict]) -> None:
    client, stub, headers = limited
    assert _status(client, headers, query="q", max_context_tokens=301) == 422
    assert _status(client, headers, query="q", max_context_tokens=15) == 422
    assert _status(client, headers, query="q", max_context_tokens=300) == 200
    assert _status(client, headers, query="q") == 200
    assert [r.max_context_tokens for r in stub.requests] == [300, 200]


def test_limits_from_the_environment(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGLINE_API__MAX_TOP_K", "5")
    for client, _, headers in _client(db_url, tmp_path):
        assert _status(client, headers, query="q", top_k=6) == 422
        assert _status(client, headers, query="q", top_k=5) == 200


def test_two_apps_keep_their_own_limits(db_url: str, tmp_path: Path) -> None:
    small = create_app(Settings(data_dir=tmp_path, database_url=db_url, api={"max_top_k": 5}), hooks=[])
    large = create_app(Settings(data_dir=tmp_path, database_url=db_url, api={"max_top_k": 50}), hooks=[])
    top_k = [
        TestClient(app)
        .get("/openapi.json")
        .json()["components"]["schemas"]["RetrieveIn"]["properties"]["top_k"]
        for app in (small, large)
    ]
    assert [t["maximum"] for t in top_k] == [5, 50]


def test_the_alias_route_validates_the_same(limited: tuple[TestClient, StubSearch, dict]) -> None:
    client, _, headers = limited
    assert _status(client, headers, "/retrieve", query="q", top_k=6) == 422
    resp = client.post("/retrieve", json={"query": "q", "top_k": 5}, headers=headers)
    assert resp.status_code == 200
    RetrieveOut.model_validate(resp.json())


def test_the_plain_json_answer_matches_retrieve_out(limited: tuple[TestClient, StubSearch, dict]) -> None:
    client, _, headers = limited
    resp = client.post("/v1/retrieve", json={"query": "glaciers"}, headers={**headers, "X-Request-ID": "r-1"})
    assert resp.status_code == 200
    out = RetrieveOut.model_validate(resp.json())
    # Every key the route writes is a field of the model, and back: no drift either way.
    assert out.model_dump(mode="json") == resp.json()
    assert out.request_id == "r-1" and out.results[0].page_range == (2, 3)


def test_push_batch_size_follows_api_max_batch_documents(db_url: str, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, database_url=db_url, api={"max_batch_documents": 2})
    with TestClient(create_app(settings, hooks=[])) as client:
        headers = {"Authorization": f"Bearer {make_key(db_url, 'acme', ['ingest'])}"}
        docs = [{"external_id": f"d{i}", "text": "x"} for i in range(3)]
        over = client.post("/v1/documents", json={"documents": docs}, headers=headers)
        assert over.status_code == 422 and "at most 2 documents" in over.json()["error"]["message"]
        ok = client.post("/v1/documents", json={"documents": docs[:2]}, headers=headers)
        assert ok.status_code == 202 and ok.json()["accepted"] == 2

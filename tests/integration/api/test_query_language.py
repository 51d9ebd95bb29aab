"""A retrieve's ``language``: where the deployment analyzes text per language, a short query
(too short to detect) is analyzed as the language it names; an unknown code is a 422."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.integration.api.conftest import full_settings, make_key, serving_client, wait_job

pytestmark = pytest.mark.integration

GERMAN = (
    "Die Häuser der Altstadt werden jedes Jahr im Frühling geprüft, und die Dächer der alten"
    " Häuser bekommen neue Ziegel, bevor der Winter kommt."
)


@pytest.fixture
def multilingual_client(db_url: str, tmp_path: Path, embedder) -> Iterator[TestClient]:
    yield from serving_client(full_settings(db_url, tmp_path, index={"lexical_multilingual": True}), embedder)


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_short_query_is_analyzed_in_the_language_it_names(
    multilingual_client: TestClient, db_url: str
) -> None:
    client = multilingual_client
    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:x")
    doc = {"external_id": "altstadt", "text": GERMAN, "acl": {"public": True}}
    resp = client.post("/v1/documents", json={"documents": [doc]}, headers=_auth(ingest))
    assert wait_job(client, ingest, resp.json()["job_id"])["state"] == "succeeded"

    def lexical(**extra: object) -> list[str]:
        body = {"query": "Häusern", "mode": "lexical", **extra}
        answer = client.post("/v1/retrieve", json=body, headers=_auth(reader))
        assert answer.status_code == 200, answer.text
        return [r["document_external_id"] for r in answer.json()["results"]]

    # One word is too short to detect: English analysis keeps "häusern", which no German
    # stem in the index matches; named German, it is stemmed to the index's "haus".
    assert lexical() == []
    assert lexical(language="de") == ["altstadt"]
    bad = client.post("/v1/retrieve", json={"query": "x", "language": "xx"}, headers=_auth(reader))
    assert bad.status_code == 422 and "language" in bad.text

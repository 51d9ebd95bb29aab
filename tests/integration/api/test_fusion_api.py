"""Tunable fusion over the API: the tenant's stored defaults apply to its every retrieve, a
request's own fields win, every answer names the fusion it used, bad values get a 422."""

from __future__ import annotations

import psycopg
import pytest
from fastapi.testclient import TestClient

from api.schemas import RetrieveOut
from tests.integration.api.conftest import make_key, wait_job

pytestmark = pytest.mark.integration

DOCS = [
    {"external_id": "keys", "text": "Rotate the signing keys in the vault every ninety days."},
    {"external_id": "certs", "text": "Certificates are renewed by the vault agent before they expire."},
    {"external_id": "lunch", "text": "Monday soup, Tuesday pasta, Wednesday fish and chips."},
    {"external_id": "backup", "text": "Nightly backups of the vault storage go to the cold bucket."},
]
SETTINGS_FUSION = {
    "method": "rrf",
    "rrf_k": 60,
    "weights": {"dense": 1.0, "lexical": 1.0},
    "candidates": {"dense": 50, "lexical": 50},
}


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _ingest(client: TestClient, db_url: str, tenant: str) -> None:
    ingest = make_key(db_url, tenant, ["ingest"])
    docs = [{**d, "acl": {"public": True}} for d in DOCS]
    resp = client.post("/v1/documents", json={"documents": docs}, headers=_auth(ingest))
    assert resp.status_code == 202, resp.text
    assert wait_job(client, ingest, resp.json()["job_id"])["state"] == "succeeded"


def test_tenant_default_applies_and_every_answer_names_its_fusion(
    full_client: TestClient, db_url: str
) -> None:
    _ingest(full_client, db_url, "acme")
    _ingest(full_client, db_url, "beta")
    admin = make_key(db_url, "acme", ["admin"])
    alice = make_key(db_url, "acme", ["query"], principal="user:alice")
    bob = make_key(db_url, "beta", ["query"], principal="user:bob")

    def search(token: str, **extra: object) -> dict:
        r = full_client.post(
            "/v1/retrieve", json={"query": "vault signing keys", **extra}, headers=_auth(token)
        )
        assert r.status_code == 200, r.text
        RetrieveOut.model_validate(r.json())
        return r.json()

    before = search(alice)
    assert before["fusion"] == SETTINGS_FUSION
    lexical_order = [x["chunk_id"] for x in search(alice, mode="lexical")["results"]]

    got = full_client.get("/v1/admin/fusion", headers=_auth(admin)).json()
    assert got["tenant"] is None and got["effective"] == SETTINGS_FUSION
    put = full_client.put(
        "/v1/admin/fusion",
        json={"method": "convex", "weights": {"dense": 0.0, "lexical": 2.0}, "candidates": {"lexical": 80}},
        headers=_auth(admin),
    )
    assert put.status_code == 200, put.text
    tenant_fusion = {
        "method": "convex",
        "rrf_k": 60,
        "weights": {"dense": 0.0, "lexical": 2.0},
        "candidates": {"dense": 50, "lexical": 80},
    }
    assert put.json()["effective"] == tenant_fusion
    assert full_client.get("/v1/admin/fusion", headers=_auth(admin)).json()["tenant"] == {
        "method": "convex",
        "dense_weight": 0.0,
        "lexical_weight": 2.0,
        "lexical_candidates": 80,
    }

    after = search(alice)
    assert after["fusion"] == tenant_fusion
    # Dense weight 0 drops the dense leg: the lexical order, each score 2 * min-max(BM25).
    assert [x["chunk_id"] for x in after["results"]] == lexical_order
    assert after["results"][0]["score"] == pytest.approx(2.0)
    assert after["results"][-1]["score"] == pytest.approx(0.0)
    # The request's own fields win over the tenant's; the rest stays the tenant's.
    rrf = search(alice, fusion={"method": "rrf", "rrf_k": 10})
    assert rrf["fusion"] == {**tenant_fusion, "method": "rrf", "rrf_k": 10}
    assert rrf["results"][0]["score"] == pytest.approx(2.0 / 11)
    # Another tenant keeps the settings.
    assert search(bob)["fusion"] == SETTINGS_FUSION

    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT tenant_id, actor, details FROM audit_log WHERE action = 'fusion.set'"
        ).fetchall()
    assert len(rows) == 1 and rows[0][0] == "acme" and rows[0][2]["fusion"]["method"] == "convex"

    # With the tenant's dense weight 0, a request zeroing the lexical leg leaves nothing to rank.
    both_zero = full_client.post(
        "/v1/retrieve", json={"query": "vault", "fusion": {"weights": {"lexical": 0}}}, headers=_auth(alice)
    )
    assert both_zero.status_code == 422, both_zero.text
    cleared = full_client.delete("/v1/admin/fusion", headers=_auth(admin))
    assert cleared.status_code == 200 and cleared.json()["tenant"] is None
    assert search(alice)["fusion"] == SETTINGS_FUSION


@pytest.mark.parametrize(
    "fusion",
    [
        {"method": "linear"},
        {"rrf_k": 0},
        {"rrf_k": "60"},
        {"rrf_k": 1.5},
        {"weights": {"dense": -1}},
        {"weights": {"dense": "1"}},
        {"weights": {"dense": True}},
        {"weights": {"dense": 1e9}},
        {"weights": {"dense": 0, "lexical": 0}},
        {"weights": {"sparse": 1}},
        {"candidates": {"dense": 0}},
        {"candidates": {"lexical": 5000}},
        {"depth": 10},
        [],
    ],
)
def test_bad_fusion_values_get_a_422(full_client: TestClient, db_url: str, fusion: object) -> None:
    alice = make_key(db_url, "acme", ["query"], principal="user:alice")
    admin = make_key(db_url, "acme", ["admin"])
    r = full_client.post("/v1/retrieve", json={"query": "vault", "fusion": fusion}, headers=_auth(alice))
    assert r.status_code == 422, r.text
    put = full_client.put("/v1/admin/fusion", json=fusion, headers=_auth(admin))
    assert put.status_code == 422, put.text
    assert full_client.get("/v1/admin/fusion", headers=_auth(admin)).json()["tenant"] is None


def test_only_an_admin_sets_the_tenant_fusion(full_client: TestClient, db_url: str) -> None:
    alice = make_key(db_url, "acme", ["query"], principal="user:alice")
    assert (
        full_client.put("/v1/admin/fusion", json={"method": "convex"}, headers=_auth(alice)).status_code
        == 403
    )
    assert full_client.get("/v1/admin/fusion", headers=_auth(alice)).status_code == 403


def test_a_change_made_elsewhere_is_in_effect_from_the_next_request(
    full_client: TestClient, db_url: str
) -> None:
    """The serving node keeps a tenant's defaults between requests and drops them when it
    applies the tenant's ``fusion`` change: a change another node writes to the catalog (here
    on a connection of its own) holds from the next request, and so does its removal."""
    from catalog import fusion as fusion_repo

    _ingest(full_client, db_url, "acme")
    alice = make_key(db_url, "acme", ["query"], principal="user:alice")

    def method() -> str:
        r = full_client.post("/v1/retrieve", json={"query": "vault keys"}, headers=_auth(alice))
        assert r.status_code == 200, r.text
        return str(r.json()["fusion"]["method"])

    assert method() == "rrf"
    assert method() == "rrf"  # now from the node's copy
    with psycopg.connect(db_url) as conn:
        fusion_repo.set_tenant_defaults(
            conn, tenant_id="acme", defaults=fusion_repo.FusionOverride(method="convex"), actor="elsewhere"
        )
    assert method() == "convex"
    assert method() == "convex"
    with psycopg.connect(db_url) as conn:
        assert fusion_repo.clear_tenant_defaults(conn, tenant_id="acme")
        kinds = conn.execute(
            "SELECT kind FROM catalog_changes WHERE tenant_id = 'acme' AND kind = 'fusion'"
        ).fetchall()
    assert method() == "rrf"
    assert kinds == [("fusion",), ("fusion",)]

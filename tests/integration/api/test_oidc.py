"""End users signed in with OIDC: ``Authorization: Bearer <JWT>`` checked against a JWKS the
test serves on loopback, with tokens it signs. Valid tokens map to tenant, principal, groups
and roles; expired, not-yet-valid, wrong-audience, wrong-issuer, ``alg: none``, HS/RS
confusion, forged-``kid`` and foreign-key tokens are refused; keys rotate; a hung or absent
JWKS endpoint is a bounded 503; another tenant's token reads only its tenant; API keys keep
working beside tokens."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import psycopg
import pytest
from fastapi.testclient import TestClient

from catalog import principals as principals_repo
from tests.integration.api.conftest import full_settings, make_key, serving_client, wait_job
from tests.integration.api.oidc_idp import Idp, issuer_config, running_idp, silent_endpoint

pytestmark = pytest.mark.integration

WORDS = "turbine vault salary rotation"
DOCS = {
    "acme": [
        ("alice-only", {"principals": ["user:corp:alice"]}),
        ("eng", {"principals": ["group:corp:eng"]}),
        ("ops", {"principals": ["group:corp:ops"]}),
        ("public", {"public": True}),
    ],
    "globex": [("globex-public", {"public": True}), ("globex-alice", {"principals": ["user:corp:alice"]})],
}


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def idp() -> Iterator[Idp]:
    with running_idp() as provider:
        yield provider


def _app(
    db_url: str, tmp_path: Path, embedder: Any, issuers: list[dict[str, Any]], **oidc: Any
) -> Iterator[TestClient]:
    settings = full_settings(
        db_url, tmp_path, oidc={"issuers": issuers, "leeway_s": 5, "jwks_min_refresh_s": 0.5, **oidc}
    )
    yield from serving_client(settings, embedder)


@pytest.fixture
def client(db_url: str, tmp_path: Path, embedder: Any, idp: Idp) -> Iterator[TestClient]:
    app = _app(db_url, tmp_path, embedder, [issuer_config(idp, namespace="corp")])
    client = next(app)
    for tenant, docs in DOCS.items():
        ingest = make_key(db_url, tenant, ["ingest"])
        body = {
            "documents": [{"external_id": e, "text": f"{tenant} {e}: {WORDS}.", "acl": a} for e, a in docs]
        }
        job = client.post("/v1/documents", json=body, headers=_auth(ingest)).json()
        assert wait_job(client, ingest, job["job_id"])["state"] == "succeeded"
    yield client
    next(app, None)


def _seen(client: TestClient, token: str, **body: Any) -> set[str]:
    resp = client.post(
        "/v1/retrieve", json={"query": WORDS, "top_k": 20, "mode": "lexical", **body}, headers=_auth(token)
    )
    assert resp.status_code == 200, resp.text
    return {r["document_external_id"] for r in resp.json()["results"]}


def _refused(client: TestClient, token: str) -> str:
    resp = client.post("/v1/retrieve", json={"query": WORDS}, headers=_auth(token))
    assert resp.status_code == 401, resp.text
    body = resp.json()["error"]
    assert body["code"] == "unauthenticated" and body["request_id"]
    return str(body["message"]).lower()


def test_a_valid_token_is_its_user(client: TestClient, idp: Idp, db_url: str) -> None:
    token = idp.token("alice", kid="k1", groups=["eng", "group:ops", "bad group!", 7])
    me = client.get("/v1/me", headers=_auth(token)).json()
    assert (me["tenant_id"], me["principal_id"], me["roles"]) == ("acme", "user:corp:alice", ["query"])
    assert _seen(client, token) == {"alice-only", "eng", "ops", "public"}
    # Groups come from the token per request: without the claim, only alice's own and public.
    assert _seen(client, idp.token("alice", kid="k1")) == {"alice-only", "public"}
    # ... joined with the catalog's groups of the principal, which change at once.
    # An admin names the issuer's user as the server does: user:<namespace>:<sub>.
    admin = _auth(make_key(db_url, "acme", ["admin"]))
    groups = client.put(
        "/v1/principals/user:corp:bob/groups", json={"groups": ["group:corp:eng"]}, headers=admin
    )
    assert groups.status_code == 200, groups.text
    bob = idp.token("bob", kid="k1")
    assert _seen(client, bob) == {"eng", "public"}
    with psycopg.connect(db_url) as conn:
        principals_repo.replace_groups(conn, tenant_id="acme", principal_id="user:corp:bob", groups=[])
    assert _seen(client, bob) == {"public"}
    # The fetch endpoints take tokens too, through the same ACL.
    assert client.get("/v1/documents/eng", headers=_auth(bob)).status_code == 404
    assert client.get("/v1/documents/alice-only", headers=_auth(token)).status_code == 200
    # The issuer's roles only: query, not ingest, no delegation.
    doc = {"documents": [{"external_id": "x", "text": "x", "acl": {"public": True}}]}
    assert client.post("/v1/documents", json=doc, headers=_auth(token)).status_code == 403
    resp = client.post(
        "/v1/retrieve", json={"query": WORDS, "as_principal": "user:bob"}, headers=_auth(token)
    )
    assert resp.status_code == 403
    # API keys keep working beside tokens; the token's alice is not the key's user:alice.
    key = make_key(db_url, "acme", ["query"], principal="user:alice")
    assert _seen(client, key) == {"public"}


def test_another_tenants_token_reads_only_its_tenant(client: TestClient, idp: Idp) -> None:
    globex = idp.token("alice", kid="k1", tenant="globex", groups=["eng"])
    assert _seen(client, globex) == {"globex-public", "globex-alice"}
    assert client.get("/v1/documents/alice-only", headers=_auth(globex)).status_code == 404
    for bad_tenant in (None, "", "acme' OR 1=1", ["acme"]):
        assert "tenant" in _refused(client, idp.token("alice", kid="k1", tenant=bad_tenant))
    # A subject that cannot be a principal id is refused, never rewritten into another one.
    for bad_sub in ("auth0|123", "alice bob", "x" * 201):
        assert "principal" in _refused(client, idp.token(bad_sub, kid="k1"))


def test_time_audience_and_issuer(client: TestClient, idp: Idp) -> None:
    now = int(time.time())
    assert "expired" in _refused(client, idp.token(kid="k1", exp=now - 60))
    assert _seen(client, idp.token(kid="k1", exp=now - 2))  # within the 5 s leeway
    assert "not yet valid" in _refused(client, idp.token(kid="k1", nbf=now + 60))
    assert "audience" in _refused(client, idp.token(kid="k1", aud="another-api"))
    assert "exp" in _refused(client, idp.token(kid="k1", exp=None))
    # A token of an issuer nobody configured is not a JWT of a configured issuer: it is looked
    # up as an API key, which it is not.
    other = Idp("https://evil.test")
    other.add_key("k1")
    try:
        assert "api key" in _refused(client, other.token(kid="k1"))
        # Claiming the trusted issuer does not help a token signed with another key.
        forged = other.token(kid="k1", iss=idp.issuer)
        assert "signature" in _refused(client, forged).lower()
    finally:
        other.close()


def test_algorithm_attacks(client: TestClient, idp: Idp) -> None:
    assert _seen(client, idp.token(kid="k1"))
    assert "algorithm" in _refused(client, idp.unsigned("alice", "k1"))
    assert "algorithm" in _refused(client, idp.hs256_with_public_key("alice", "k1"))
    # RS512 is not among this issuer's algorithms, even with the right key.
    assert "algorithm" in _refused(client, idp.token(kid="k1", alg="RS512"))
    # An EC-signed token naming the RSA key's kid: the algorithm is bound to the key's type.
    idp.add_key("ec1", "EC")
    time.sleep(0.6)  # past jwks_min_refresh_s, so the new kid is fetched
    assert _seen(client, idp.token(kid="ec1"))  # ES256 with a published EC key is fine
    crossed = jwt.encode(idp.claims(), idp.private["ec1"], algorithm="ES256", headers={"kid": "k1"})
    assert "does not match" in _refused(client, crossed)


def test_forged_kid_and_rate_limited_refresh(client: TestClient, idp: Idp) -> None:
    assert _seen(client, idp.token(kid="k1"))
    fetches = idp.hits
    idp.add_key("attacker", publish=False)
    for _ in range(20):
        assert "does not publish" in _refused(client, idp.token(kid="attacker"))
    # Twenty unknown kids inside the refresh interval: at most one refetch, not twenty.
    assert idp.hits - fetches <= 1


def test_key_rotation(client: TestClient, idp: Idp) -> None:
    old = idp.token("alice", kid="k1")
    assert _seen(client, old)
    idp.add_key("k2", publish=False)
    idp.published = ["k2"]  # the provider rotates: k2 in, k1 out
    time.sleep(0.6)  # past jwks_min_refresh_s
    assert _seen(client, idp.token("alice", kid="k2"))  # unknown kid: refetched, accepted
    assert "does not publish" in _refused(client, old)  # k1 left the refetched set


def test_revocation_is_the_token_lifetime(client: TestClient, idp: Idp) -> None:
    short = idp.token("alice", kid="k1", exp=int(time.time()) + 1)
    assert _seen(client, short)
    time.sleep(1 + 5 + 0.5)  # lifetime + leeway
    assert "expired" in _refused(client, short)


@pytest.mark.parametrize("hung", [True, False])
def test_an_unreachable_jwks_is_a_bounded_503(db_url: str, tmp_path: Path, embedder: Any, hung: bool) -> None:
    idp = Idp()
    idp.add_key("k1")
    with silent_endpoint() as silent:
        url = silent if hung else "http://127.0.0.1:9/jwks"
        app = _app(
            db_url,
            tmp_path,
            embedder,
            [issuer_config(idp, jwks_url=url)],
            jwks_timeout_s=0.5,
            jwks_min_refresh_s=30,
        )
        client = next(app)
        started = time.monotonic()
        resp = client.post("/v1/retrieve", json={"query": WORDS}, headers=_auth(idp.token(kid="k1")))
        assert resp.status_code == 503 and resp.json()["error"]["code"] == "unavailable", resp.text
        assert time.monotonic() - started < 5
        # Within jwks_min_refresh_s nothing is fetched again: the next answer is immediate.
        started = time.monotonic()
        resp = client.post("/v1/retrieve", json={"query": WORDS}, headers=_auth(idp.token(kid="k1")))
        assert resp.status_code == 503 and time.monotonic() - started < 0.4
        next(app, None)
    idp.close()


def test_settings_refuse_unsafe_issuers() -> None:
    from pydantic import ValidationError

    from core.settings import OidcSettings

    base = {"issuer": "https://idp", "jwks_url": "https://idp/jwks", "audience": "ragline", "tenant": "acme"}
    unsafe = (
        {"algorithms": ["HS256"]},
        {"algorithms": ["none"]},
        {"tenant_claim": "t"},
        {"tenant": None},
        {"jwks_url": "http://idp.example.com/jwks"},
        {"jwks_url": "file:///etc/keys.json"},
    )
    OidcSettings(issuers=[{**base, "jwks_url": "http://127.0.0.1:8080/jwks"}])
    for bad in unsafe:
        with pytest.raises(ValidationError):
            OidcSettings(issuers=[{**base, **bad}])
    with pytest.raises(ValidationError):
        OidcSettings(issuers=[base, base])

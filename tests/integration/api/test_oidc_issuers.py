"""Two trusted issuers for one tenant, and a slow one. A partner provider's ``alice`` is not
the company directory's ``alice`` nor an administrator key's ``user:alice``: it reads neither's
documents and inherits neither's groups, and its group claims are its own; an issuer mapped
onto the shared names explicitly is the one exception. A burst of forged tokens naming an
issuer whose JWKS endpoint is slow holds no worker thread: another tenant's API-key retrieves
stay as fast as before it, and the burst causes a bounded number of JWKS fetches."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.services import ingest_hook, search_hook
from authz.jwks import Jwks
from catalog import principals as principals_repo
from core.errors import AuthenticationError, UnavailableError
from testkit.server import app_in_thread
from tests.integration.api.conftest import full_settings, make_key, push_and_wait, serving_client
from tests.integration.api.oidc_idp import Idp, issuer_config

pytestmark = pytest.mark.integration

WORDS = "turbine vault salary rotation"


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def idps() -> Iterator[dict[str, Idp]]:
    made = {name: Idp(f"https://{name}.test/realms/acme") for name in ("corp", "partner", "directory")}
    for provider in made.values():
        provider.add_key("k1")
    yield made
    for provider in made.values():
        provider.close()


def _seen(client: TestClient, token: str) -> set[str]:
    resp = client.post(
        "/v1/retrieve", json={"query": WORDS, "top_k": 20, "mode": "lexical"}, headers=_auth(token)
    )
    assert resp.status_code == 200, resp.text
    return {r["document_external_id"] for r in resp.json()["results"]}


def test_a_same_sub_user_of_another_issuer_reads_nothing_of_alices(
    db_url: str, tmp_path: Path, embedder: Any, idps: dict[str, Idp]
) -> None:
    corp, partner, directory = idps["corp"], idps["partner"], idps["directory"]
    issuers = [
        issuer_config(corp, tenant="acme", tenant_claim=None),
        issuer_config(partner, tenant="acme", tenant_claim=None),
        # The directory of record, mapped onto the names keys and the catalog use, by choice.
        issuer_config(directory, tenant="acme", tenant_claim=None, map_subjects=True, map_groups=True),
    ]
    settings = full_settings(db_url, tmp_path, oidc={"issuers": issuers, "jwks_min_refresh_s": 0.5})
    app = serving_client(settings, embedder)
    client = next(app)
    # Who each one is, as the server names it (then the documents are shared with exactly that).
    corp_alice = client.get("/v1/me", headers=_auth(corp.token("alice", kid="k1"))).json()["principal_id"]
    with psycopg.connect(db_url) as conn:
        principals_repo.replace_groups(
            conn, tenant_id="acme", principal_id="user:alice", groups=["group:admins"]
        )
    docs = [
        ("corp-alice", [corp_alice]),
        ("key-alice", ["user:alice"]),  # an administrator key's principal
        ("admins", ["group:admins"]),  # a group of the catalog (user:alice is in it)
        ("public", None),
    ]
    push_and_wait(
        client,
        make_key(db_url, "acme", ["ingest"]),
        [
            {"external_id": e, "text": f"{e}: {WORDS}.", "acl": {"principals": p} if p else {"public": True}}
            for e, p in docs
        ],
    )
    admin_key = make_key(db_url, "acme", ["query", "admin"], principal="user:alice")
    assert _seen(client, admin_key) == {"key-alice", "admins", "public"}
    assert _seen(client, corp.token("alice", kid="k1")) == {"corp-alice", "public"}
    # The partner's alice, even claiming the administrators' group: only what is public.
    partner_alice = partner.token("alice", kid="k1", groups=["admins", "group:admins"])
    assert _seen(client, partner_alice) == {"public"}
    me = client.get("/v1/me", headers=_auth(partner_alice)).json()
    assert me["principal_id"] not in (corp_alice, "user:alice")
    # An issuer mapped explicitly is the shared user:alice, with the catalog's groups.
    assert _seen(client, directory.token("alice", kid="k1")) == {"key-alice", "admins", "public"}
    next(app, None)


def test_a_slow_identity_provider_stalls_no_other_tenant(
    db_url: str, tmp_path: Path, embedder: Any, idps: dict[str, Idp]
) -> None:
    slow = idps["partner"]
    slow.delay_s = 6.0
    issuers = [issuer_config(slow, tenant="slowco", tenant_claim=None)]
    # The defaults that matter: jwks_min_refresh_s 30, jwks_wait_s 0.5.
    settings = full_settings(db_url, tmp_path, oidc={"issuers": issuers})
    app = create_app(
        settings, hooks=[partial(ingest_hook, embedder=embedder), partial(search_hook, embedder=embedder)]
    )
    key = make_key(db_url, "globex", ["query"])
    slow.add_key("forged", publish=False)
    forged = [slow.token("mallory", kid="forged", jti=str(n)) for n in range(64)]
    with app_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as http:

        def retrieve_s() -> float:
            started = time.monotonic()
            resp = http.post("/v1/retrieve", json={"query": WORDS, "mode": "lexical"}, headers=_auth(key))
            assert resp.status_code == 200, resp.text
            return time.monotonic() - started

        retrieve_s()  # warm
        baseline = statistics.median(retrieve_s() for _ in range(5))
        fetches = slow.hits
        with ThreadPoolExecutor(len(forged)) as pool, httpx.Client(base_url=url, timeout=30) as burst:
            answers = [
                pool.submit(burst.post, "/v1/retrieve", json={"query": WORDS}, headers=_auth(token))
                for token in forged
            ]
            time.sleep(0.3)  # the burst is in flight
            window_ends, during = time.monotonic() + 2.0, 0.0
            while time.monotonic() < window_ends:
                during = max(during, retrieve_s())
            codes = {answer.result().status_code for answer in answers}
    # Forged tokens are refused (401, or 503 while keys are fetched), never served.
    assert codes <= {401, 503}, codes
    # Unstalled: a fetch of 6 s under a lock in the request's threads made this seconds.
    assert during < max(10 * baseline, 1.5), (during, baseline)
    # Sixty-four forged kids: at most the start-up fetch and one refetch, not one each.
    assert slow.hits - fetches <= 2


def test_keys_are_fetched_once_per_interval_and_waited_for_by_one_request(idps: dict[str, Idp]) -> None:
    slow = idps["partner"]
    slow.delay_s = 2.0
    with ThreadPoolExecutor(1) as executor:
        jwks = Jwks(slow.jwks_url, executor, timeout_s=5, cache_s=300, min_refresh_s=30, wait_s=0.1)
        started = time.monotonic()
        with pytest.raises(UnavailableError, match="being fetched"):
            jwks.key("k1")  # it started the fetch: waits its 0.1 s, not the provider's 2 s
        with pytest.raises(UnavailableError, match="being fetched"):
            jwks.key("k1")  # a fetch is pending: refused at once, no second fetch
        assert time.monotonic() - started < 1.5 and jwks.fetches == 1
        time.sleep(2.5)  # the fetch lands in the background
        assert jwks.key("k1")["kid"] == "k1"
        for n in range(20):  # forged kids inside the interval: no fetch at all
            with pytest.raises(AuthenticationError, match="does not publish"):
                jwks.key(f"forged-{n}")
        jwks.refresh_if_stale()  # fresh: nothing to do
        assert jwks.fetches == 1 and slow.hits == 1

"""Permission attacks through the HTTP API, as a standing suite: cross-tenant reads in every
mode and filter, ``as_principal`` abuse, filter injection, role confusion and other tenants'
jobs and documents by id. Every answer is checked against the oracle of what the caller may
read; the suite counts its checks and requires 0 leaks."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from fastapi.testclient import TestClient

from catalog import jobs as jobs_repo
from catalog import principals as principals_repo
from tests import factories
from tests.integration.api.conftest import make_key, wait_job

pytestmark = pytest.mark.integration

WORDS = "turbine vault salary rotation pasta incident"
DOCS = {
    "acme": [
        ("secret-a", {"principals": ["user:alice"]}, {"team": "finance"}),
        ("group-a", {"principals": ["group:eng"]}, {"team": "eng"}),
        ("public-a", {"public": True}, {"team": "eng"}),
        ("handbook", {"principals": ["user:alice"]}, {"team": "hr"}),
        # Shared with a partner identity provider's alice and group (namespace ``partner``):
        # no key's principal, and no other issuer's alice, reads them.
        ("partner-a", {"principals": ["user:partner:alice"]}, {"team": "finance"}),
        ("partner-eng", {"principals": ["group:partner:eng"]}, {"team": "eng"}),
    ],
    "globex": [
        ("public-g", {"public": True}, {"team": "eng"}),
        ("handbook", {"principals": ["user:mallory"]}, {"team": "hr"}),
        ("partner-g", {"principals": ["user:partner:alice"]}, {"team": "eng"}),
    ],
}
# What each (tenant, principal) with an API key may read: the oracle (test_permission_attacks_oidc
# adds the token principals).
READABLE = {
    ("acme", "user:alice"): {"secret-a", "group-a", "public-a", "handbook"},
    ("acme", "user:bob"): {"public-a"},
    ("globex", "user:alice"): {"public-g"},
    ("globex", "user:mallory"): {"public-g", "handbook"},
}
FILTERS = [
    {},
    {"metadata": {"team": "finance"}},
    {"metadata": {"team": ["eng", "hr", "finance"]}},
    {"source": []},
    {"created_after": "2000-01-01"},
    {"mime_type": ["text/plain"]},
]
INJECTIONS = [
    "finance' OR '1'='1",
    'finance" OR "1"="1',
    "x'); DELETE FROM chunks; --",
    "%",
    "*",
    "\\",
    '{"$ne": null}',
    "a" * 500,
]


def _auth(t: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {t}"}


class World:
    def __init__(self, client: TestClient, db_url: str) -> None:
        self.client = client
        self.ingest = {t: make_key(db_url, t, ["ingest"]) for t in DOCS}
        # The readers' bearers by (tenant, principal), and what each may read.
        self.readers = {(t, p): make_key(db_url, t, ["query"], principal=p) for (t, p) in READABLE}
        self.readable = dict(READABLE)
        self.keys = dict(self.readers)  # kept where a variant reads with tokens instead
        self.delegate = {
            t: make_key(db_url, t, ["query"], principal="service:portal", delegate=True) for t in DOCS
        }
        self.admins = {t: make_key(db_url, t, ["admin"], principal="user:root") for t in DOCS}
        self.operator = make_key(db_url, "operator", ["operator"], principal="service:ops")
        self.db_url = db_url
        self.jobs: dict[str, str] = {}
        with psycopg.connect(db_url) as conn:
            principals_repo.replace_groups(
                conn, tenant_id="acme", principal_id="user:alice", groups=["group:eng"]
            )
        for tenant, docs in DOCS.items():
            body = {
                "documents": [
                    {"external_id": ext, "text": f"{tenant} {ext}: {WORDS}.", "acl": acl, "metadata": meta}
                    for ext, acl, meta in docs
                ]
            }
            job = client.post("/v1/documents", json=body, headers=_auth(self.ingest[tenant])).json()
            assert wait_job(client, self.ingest[tenant], job["job_id"])["state"] == "succeeded"
            self.jobs[tenant] = job["job_id"]
        self.checks = 0
        self.leaks: list[str] = []

    def retrieve(self, token: str, **body: object):
        return self.client.post(
            "/v1/retrieve", json={"query": WORDS, "top_k": 20, **body}, headers=_auth(token)
        )

    def expect_only(self, resp, allowed: set[str], tenant: str, what: str) -> None:
        self.checks += 1
        if resp.status_code != 200:
            self.leaks.append(f"{what}: status {resp.status_code} {resp.text[:200]}")
            return
        results = resp.json()["results"]
        got = {r["document_external_id"] for r in results}
        texts_ok = all(r["text"].startswith(f"{tenant} ") for r in results)
        if not got <= allowed or not texts_ok:
            self.leaks.append(f"{what}: got {sorted(got)} allowed {sorted(allowed)}")


@pytest.fixture
def world(full_client: TestClient, db_url: str) -> World:
    return World(full_client, db_url)


def test_cross_tenant_reads_in_every_mode_and_filter(world: World) -> None:
    for (tenant, principal), token in world.readers.items():
        for mode in ("hybrid", "dense", "lexical"):
            for filters in FILTERS:
                for rerank in (False, True) if mode == "hybrid" else (False,):
                    resp = world.retrieve(token, mode=mode, filters=filters, rerank=rerank)
                    world.expect_only(
                        resp,
                        world.readable[(tenant, principal)],
                        tenant,
                        f"{tenant}/{principal} {mode} {filters}",
                    )
    # The oracle is reachable: every reader sees all it may (the suite is not vacuous).
    for (tenant, principal), token in world.readers.items():
        own = world.retrieve(token, mode="lexical")
        world.checks += 1
        got = {r["document_external_id"] for r in own.json()["results"]}
        if got != world.readable[(tenant, principal)]:
            world.leaks.append(f"{tenant}/{principal} sees {sorted(got)}, not all it may")
    assert world.leaks == [] and world.checks == len(world.readers) * ((2 + 1 + 1) * len(FILTERS) + 1)


def test_as_principal_abuse(world: World) -> None:
    plain = world.readers[("globex", "user:mallory")]
    resp = world.retrieve(plain, as_principal="user:alice")
    assert resp.status_code == 403, resp.text  # no delegation right
    # Delegation stays inside the key's tenant: globex's portal acting as alice sees
    # globex-alice's documents, never acme-alice's.
    resp = world.retrieve(world.delegate["globex"], as_principal="user:alice")
    world.expect_only(resp, READABLE[("globex", "user:alice")], "globex", "delegate across tenants")
    resp = world.retrieve(world.delegate["acme"], as_principal="user:alice", mode="lexical")
    world.expect_only(resp, READABLE[("acme", "user:alice")], "acme", "delegate in tenant")
    assert {r["document_external_id"] for r in resp.json()["results"]} == READABLE[("acme", "user:alice")]
    for bad in (
        "group:eng",
        "user:*",
        "*",
        "user:alice\n",
        "user:alice,group:eng",
        "service:portal user:alice",
        "",
    ):
        resp = world.retrieve(world.delegate["acme"], as_principal=bad)
        world.checks += 1
        if resp.status_code != 422:
            world.leaks.append(f"as_principal {bad!r}: {resp.status_code}")
    assert world.leaks == []


def test_filter_injection(world: World) -> None:
    token = world.readers[("acme", "user:bob")]
    for value in INJECTIONS:
        for filters in (
            {"metadata": {"team": value}},
            {"metadata": {"team": [value, "eng"]}},
            {"source": [value]},
            {"mime_type": [value]},
        ):
            world.expect_only(
                world.retrieve(token, filters=filters),
                READABLE[("acme", "user:bob")],
                "acme",
                str(filters)[:80],
            )
    for bad in (
        {"metadata": {"team": {"$ne": None}}},
        {"metadata": {"team": [["eng"]]}},
        {"metadata": {"team' OR 1=1": "x"}},
        {"metadata": {"team": "a" * 501}},
        {"acl": {"public": True}},
        {"source": "eng"},
        {"created_after": "2000-01-01'; DROP TABLE chunks; --"},
    ):
        resp = world.retrieve(token, filters=bad)
        world.checks += 1
        if resp.status_code != 422:
            world.leaks.append(f"filters {bad}: {resp.status_code}")
    for bad_body in ({"principal": "user:alice"}, {"tenant_id": "globex"}, {"acl": {"public": True}}):
        resp = world.retrieve(token, **bad_body)
        world.checks += 1
        if resp.status_code != 422:
            world.leaks.append(f"body {bad_body}: {resp.status_code}")
    assert world.leaks == []


def test_role_confusion(world: World) -> None:
    query, ingest = world.readers[("acme", "user:alice")], world.ingest["acme"]
    doc = {"documents": [{"external_id": "x", "text": "x", "acl": {"public": True}}]}
    attempts = [
        ("POST", "/v1/documents", query, doc),
        ("DELETE", "/v1/documents/public-a", query, None),
        ("PUT", "/v1/documents/public-a/acl", query, {"principals": [], "public": True}),
        ("GET", f"/v1/jobs/{world.jobs['acme']}", query, None),
        ("GET", "/v1/jobs", query, None),
        ("PUT", "/v1/principals/user:bob/groups", query, {"groups": ["group:eng"]}),
        ("PUT", "/v1/principals/user:bob/groups", ingest, {"groups": ["group:eng"]}),
        ("POST", "/v1/retrieve", ingest, {"query": WORDS}),
    ]
    for method, path, token, body in attempts:
        resp = world.client.request(method, path, json=body, headers=_auth(token))
        world.checks += 1
        if resp.status_code != 403 or resp.json()["error"]["code"] != "forbidden":
            world.leaks.append(f"{method} {path}: {resp.status_code}")
    # Nothing changed: bob still reads only the public document.
    world.expect_only(world.retrieve(world.readers[("acme", "user:bob")]), {"public-a"}, "acme", "after")
    assert world.leaks == []


def test_other_tenants_jobs_and_documents_by_id(world: World) -> None:
    mallory = world.ingest["globex"]
    acme_job = world.jobs["acme"]
    for method, path, body in (
        ("GET", f"/v1/jobs/{acme_job}", None),
        ("POST", f"/v1/jobs/{acme_job}:cancel", None),
        ("DELETE", "/v1/documents/secret-a", None),
        ("PUT", "/v1/documents/secret-a/acl", {"principals": ["user:mallory"], "public": True}),
    ):
        resp = world.client.request(method, path, json=body, headers=_auth(mallory))
        world.checks += 1
        if resp.status_code != 404 or "acme" in resp.text:
            world.leaks.append(f"{method} {path}: {resp.status_code} {resp.text[:120]}")
    listed = world.client.get("/v1/jobs", headers=_auth(mallory)).json()
    world.checks += 1
    if acme_job in {j["job_id"] for j in listed}:
        world.leaks.append("acme's job listed to globex")
    # Same external id in both tenants: globex's delete hits only globex's copy.
    assert world.client.delete("/v1/documents/handbook", headers=_auth(mallory)).status_code == 200
    world.expect_only(
        world.retrieve(world.readers[("acme", "user:alice")], mode="lexical"),
        READABLE[("acme", "user:alice")],
        "acme",
        "acme after globex deletes its handbook",
    )
    still = world.retrieve(world.readers[("acme", "user:alice")], mode="lexical").json()["results"]
    assert {"handbook", "secret-a"} <= {r["document_external_id"] for r in still}
    assert world.leaks == []


def test_a_tenant_admin_cannot_run_the_deployment(world: World, tmp_path) -> None:
    """Index versions, aliases, re-embeds and GC belong to the operator: a tenant admin's key
    is refused them all (and cannot mint an operator key), and sees only its own tenant's
    jobs in the status, while the operator sees every tenant's."""
    from jobs.rebuild_job import rebuild

    config = factories.rebuild(index_root=tmp_path / "indexes", n_shards=1)
    v1, v2 = rebuild(world.db_url, config), rebuild(world.db_url, config)
    op = _auth(world.operator)
    assert (
        world.client.post(
            "/v1/admin/index/aliases/live:swap", json={"version_id": v1}, headers=op
        ).status_code
        == 200
    )
    assert (
        world.client.post(
            "/v1/admin/index/aliases/live:swap", json={"version_id": v2}, headers=op
        ).status_code
        == 200
    )
    with psycopg.connect(world.db_url) as conn:  # a queued acme job no runner has picked up
        item = jobs_repo.NewItem(external_id="late", mime_type="text/plain", payload=b"A late memo.")
        acme_queued = str(jobs_repo.create_job(conn, tenant_id="acme", kind="ingest", items=[item]))
    globex = world.admins["globex"]
    attempts = [
        ("POST", "/v1/admin/index/aliases/live:swap", {"version_id": v1}),
        ("POST", "/v1/admin/index/aliases/live:rollback", None),
        ("POST", "/v1/admin/index/aliases/junk:swap", {"version_id": v1}),
        ("POST", f"/v1/admin/index/versions/{v1}:quality", None),
        ("POST", "/v1/admin/index:gc", None),
        ("GET", "/v1/admin/index", None),
        ("POST", "/v1/admin/reembed", {"model": "bundled:all-MiniLM-L6-v2", "shards": 593, "force": True}),
        ("POST", "/v1/admin/keys", {"roles": ["operator"]}),
        ("POST", "/v1/admin/keys", {"roles": ["admin", "operator"]}),
    ]
    for method, path, body in attempts:
        resp = world.client.request(method, path, json=body, headers=_auth(globex))
        world.checks += 1
        if resp.status_code != 403 or resp.json()["error"]["code"] != "forbidden":
            world.leaks.append(f"tenant admin {method} {path}: {resp.status_code} {resp.text[:120]}")
    # An operator key is not a tenant admin either: no tenant's principals, keys or searches.
    for method, path, body in (
        ("GET", "/v1/admin/principals", None),
        ("POST", "/v1/admin/retrieve", {"query": WORDS}),
        ("POST", "/v1/admin/explain", {"external_id": "secret-a", "as_principal": "user:alice"}),
        ("POST", "/v1/retrieve", {"query": WORDS}),
        ("POST", "/v1/admin/keys", {"roles": ["admin"]}),
    ):
        resp = world.client.request(method, path, json=body, headers=op)
        world.checks += 1
        if resp.status_code != 403:
            world.leaks.append(f"operator {method} {path}: {resp.status_code} {resp.text[:120]}")
    # live is where the operator left it.
    served = world.client.post(
        "/v1/retrieve", json={"query": WORDS}, headers=_auth(world.readers[("acme", "user:bob")])
    )
    assert served.json()["index_version"] == v2
    # Status: the tenant admin sees its own tenant only, the operator the deployment.
    mine = world.client.get("/v1/admin/status", headers=_auth(globex)).json()
    assert mine["scope"] == "tenant" and mine["shards"] == [] and mine["capacity"] is None
    assert mine["node"] is None and mine["last_rebuild"] is None
    assert {j["tenant_id"] for j in mine["running_jobs"]} <= {"globex"}
    assert acme_queued not in {j["job_id"] for j in mine["running_jobs"]} and "acme" not in str(mine)
    deployment = world.client.get("/v1/admin/status", headers=op).json()
    assert deployment["scope"] == "deployment" and deployment["shards"]
    assert acme_queued in {j["job_id"] for j in deployment["running_jobs"]}
    # The operator may mint another operator key; a tenant admin may not revoke it.
    made = world.client.post("/v1/admin/keys", json={"roles": ["operator"]}, headers=op)
    assert made.status_code == 201, made.text
    key_id = made.json()["key"]["key_id"]
    refused = world.client.post(f"/v1/admin/keys/{key_id}:revoke", headers=_auth(globex))
    assert refused.status_code == 404
    assert world.client.get("/v1/admin/index", headers=_auth(made.json()["token"])).status_code == 200
    # An operator follows its own tenant's jobs (its re-embeds), never another tenant's.
    own = world.client.get("/v1/jobs", headers=op)
    assert own.status_code == 200 and acme_queued not in {j["job_id"] for j in own.json()}
    assert world.client.get(f"/v1/jobs/{acme_queued}", headers=op).status_code == 404
    assert world.leaks == [] and world.checks == len(attempts) + 5


def test_no_existence_oracle_across_tenants(world: World) -> None:
    """An id another tenant holds answers exactly as an id nobody holds, in explain and every
    by-id route; stored chunk ids are keyed, so they cannot be derived from a guessed
    external id and offsets."""
    from ingest.hashing import chunk_id

    acme_admin, acme_ingest = _auth(world.admins["acme"]), _auth(world.ingest["acme"])
    globex_job = world.jobs["globex"]
    with psycopg.connect(world.db_url) as conn:
        rows = conn.execute(
            "SELECT c.chunk_id, d.tenant_id, d.external_id, c.version, c.char_start, c.char_end, c.level"
            " FROM chunks c JOIN documents d USING (doc_id)"
        ).fetchall()
    for cid, tenant, ext, version, start, end, level in rows:
        world.checks += 1
        if cid == chunk_id(tenant, ext, version, start, end, level):
            world.leaks.append(f"chunk id of {tenant}/{ext} derivable without the key")
    globex_chunk = next(r[0] for r in rows if r[1] == "globex")
    missing_chunk = "0" * 64

    def explain(**body: str):
        return world.client.post(
            "/v1/admin/explain", json={"as_principal": "user:alice", **body}, headers=acme_admin
        )

    pairs = [  # (another tenant's id, an id nobody holds, request maker)
        ("public-g", "nobody-has-this", lambda i: explain(external_id=i)),
        (globex_chunk, missing_chunk, lambda i: explain(chunk_id=i)),
        (
            "public-g",
            "nobody-has-this",
            lambda i: world.client.delete(f"/v1/documents/{i}", headers=acme_ingest),
        ),
        (
            "public-g",
            "nobody-has-this",
            lambda i: world.client.put(
                f"/v1/documents/{i}/acl", json={"principals": [], "public": True}, headers=acme_ingest
            ),
        ),
        (globex_job, str(uuid.uuid4()), lambda i: world.client.get(f"/v1/jobs/{i}", headers=acme_ingest)),
        (
            globex_job,
            str(uuid.uuid4()),
            lambda i: world.client.post(f"/v1/jobs/{i}:cancel", headers=acme_ingest),
        ),
        (
            globex_job,
            str(uuid.uuid4()),
            lambda i: world.client.post(f"/v1/jobs/{i}:resume", headers=acme_ingest),
        ),
    ]
    for theirs, nobodys, ask in pairs:
        a, b = ask(theirs), ask(nobodys)
        world.checks += 1
        # request ids differ per call: compare the bodies without them
        a_body = {k: v for k, v in a.json().items() if k != "request_id"}
        b_body = {k: v for k, v in b.json().items() if k != "request_id"}
        if "error" in a_body:
            a_body["error"] = {k: v for k, v in a_body["error"].items() if k != "request_id"}
            b_body["error"] = {k: v for k, v in b_body["error"].items() if k != "request_id"}
        if a.status_code != b.status_code or str(a_body).replace(theirs, nobodys) != str(b_body):
            world.leaks.append(f"{theirs} answers unlike {nobodys}: {a.text[:160]} / {b.text[:160]}")
    # The keyed ids keep re-ingesting idempotent: the same content is unchanged, same ids.
    before = {r[0] for r in rows if r[1] == "acme"}
    again = {
        "documents": [
            {"external_id": ext, "text": f"acme {ext}: {WORDS}.", "acl": acl, "metadata": meta}
            for ext, acl, meta in DOCS["acme"]
        ]
    }
    job = world.client.post("/v1/documents", json=again, headers=acme_ingest).json()
    done = wait_job(world.client, world.ingest["acme"], job["job_id"])
    assert done["documents"]["unchanged"] == len(DOCS["acme"])
    with psycopg.connect(world.db_url) as conn:
        after = {
            r[0]
            for r in conn.execute(
                "SELECT c.chunk_id FROM chunks c JOIN documents d USING (doc_id) WHERE d.tenant_id = 'acme'"
            )
        }
    assert after == before
    assert world.leaks == [] and world.checks == len(rows) + len(pairs)

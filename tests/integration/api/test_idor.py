"""The IDOR suite (issue 43): every API route that takes an id, in its path, query or body,
called with another tenant's ids and, where ownership is per principal, another principal's.

The routes come from the app's own OpenAPI document, so a new route that takes an id fails
``test_every_route_that_takes_an_id_is_probed`` until it has a row in ``probes``. Each probe
asks twice, with the victim's id and with an id nobody holds: the two answers must be the
same (status and body, the id aside: no existence oracle), a refusal where the id names
something (404, or 403 for the operator's routes), and hold nothing of the victim's. At the
end the victim's rows (documents, groups, keys, jobs, connector state, feedback) are as they
were. The module also holds the tenant admin's view of deployment figures and feedback's
binding to the caller's own request, on the same world.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from starlette import testclient

from authz.api_keys import create_key
from jobs.rebuild_job import rebuild
from testkit.server import auth
from tests import factories
from tests.conftest import truncate_all
from tests.integration.api.conftest import full_settings, push_and_wait, serving_client, swap_live, wait_job

# The TestClient's responses: httpx2's where it is installed (starlette prefers it), else httpx's.
Response = testclient.httpx.Response

pytestmark = pytest.mark.integration

MARK = "Lighthouse ledger"  # words of every document, so any search finds them all
GLOBEX_TEXT = f"{MARK}: the globex merger terms are confidential."
ALICE_TEXT = f"{MARK}: alice's own salary review notes."
# What acme must never see of globex (its tenant name, its text, its group, its cursor), nor
# anyone but alice of alice's document.
VICTIM_MARKS = ("globex", "merger terms", "group:gx-board", "gx-cursor", "salary review")
# Fields that differ between two calls whatever they name (fresh ids, clocks, timings).
VOLATILE = {"request_id", "job_id", "key_id", "token", "feedback_id", "created_at", "updated_at"}
VOLATILE |= {"timings_ms", "took_ms", "latency_ms", "started_at", "finished_at"}
# Parameter and body field names that carry an id.
ID_FIELD = re.compile(r"(_id|^connector|^alias|^as_principal)$")


@dataclass(frozen=True, slots=True)
class World:
    client: TestClient
    db_url: str
    keys: dict[str, str]  # role name -> token
    ids: dict[str, str]  # what the victim (and alice) hold -> id


def _key(
    db_url: str, tenant: str, roles: list[str], principal: str | None = None, **kw: Any
) -> tuple[str, str]:
    with psycopg.connect(db_url) as conn:
        made = create_key(conn, tenant_id=tenant, roles=roles, principal_id=principal, **kw)
    return made.token, made.key_id


@pytest.fixture(scope="module")
def world(pg_url: str, tmp_path_factory: pytest.TempPathFactory, embedder) -> Iterator[World]:
    """Two tenants on one app that stores query text: globex the victim, acme the attacker
    (an ingest key, an admin, a delegating service, alice and bob), one built index."""
    truncate_all(pg_url)
    tmp = tmp_path_factory.mktemp("idor")
    settings = full_settings(pg_url, tmp, audit={"store_query_text": True})
    for client in serving_client(settings, embedder, audit=True):
        yield _build(client, pg_url, tmp)


def _build(client: TestClient, db_url: str, tmp: Path) -> World:
    keys: dict[str, str] = {}
    ids: dict[str, str] = {}
    keys["g_ingest"], _ = _key(db_url, "globex", ["ingest"])
    keys["g_admin"], _ = _key(db_url, "globex", ["admin"], "user:groot")
    keys["gina"], ids["g_key"] = _key(db_url, "globex", ["query"], "user:gina")
    keys["ingest"], _ = _key(db_url, "acme", ["ingest"])
    keys["admin"], _ = _key(db_url, "acme", ["admin"], "user:root")
    keys["alice"], _ = _key(db_url, "acme", ["query"], "user:alice")
    keys["bob"], _ = _key(db_url, "acme", ["query"], "user:bob")
    keys["portal"], _ = _key(db_url, "acme", ["query"], "service:portal", can_delegate=True)
    keys["operator"], _ = _key(db_url, "operator", ["operator"], "service:ops")
    put = client.put(
        "/v1/principals/user:gina/groups", json={"groups": ["group:gx-board"]}, headers=auth(keys["g_admin"])
    )
    assert put.status_code == 200, put.text
    globex = [
        {"external_id": "board-minutes", "text": GLOBEX_TEXT, "acl": {"principals": ["group:gx-board"]}},
        {"external_id": "gx-handbook", "text": f"{MARK}: the handbook.", "acl": {"public": True}},
    ]
    resp = client.post(
        "/v1/documents?connector=gx-sync", json={"documents": globex}, headers=auth(keys["g_ingest"])
    )
    assert resp.status_code == 202, resp.text
    ids["g_job"] = resp.json()["job_id"]
    assert wait_job(client, keys["g_ingest"], ids["g_job"])["state"] == "succeeded"
    saved = client.patch(
        "/v1/connectors/gx-sync/state", json={"cursor": "gx-cursor-7"}, headers=auth(keys["g_ingest"])
    )
    assert saved.status_code == 200, saved.text
    push_and_wait(
        client,
        keys["ingest"],
        [
            {"external_id": "alice-notes", "text": ALICE_TEXT, "acl": {"principals": ["user:alice"]}},
            {"external_id": "acme-faq", "text": f"{MARK}: the acme faq.", "acl": {"public": True}},
        ],
    )
    with psycopg.connect(db_url) as conn:
        chunk_of: dict[str, str] = dict(
            conn.execute(
                "SELECT d.tenant_id || '/' || d.external_id, min(c.chunk_id) FROM chunks c"
                " JOIN documents d USING (doc_id) GROUP BY 1"
            ).fetchall()
        )
    ids["g_chunk"], ids["alice_chunk"] = chunk_of["globex/board-minutes"], chunk_of["acme/alice-notes"]
    version = rebuild(db_url, factories.rebuild(index_root=tmp / "indexes", n_shards=1))
    assert swap_live(db_url, client, version) == version
    ids["version"] = version
    asked = client.post(
        "/v1/retrieve", json={"query": MARK}, headers={**auth(keys["gina"]), "X-Request-ID": "gx-rid-1"}
    )
    assert asked.status_code == 200 and asked.json()["request_id"] == "gx-rid-1", asked.text
    ids["g_request"] = "gx-rid-1"
    mine = client.post(
        "/v1/retrieve",
        json={"query": MARK},
        headers={**auth(keys["alice"]), "X-Request-ID": "acme-rid-alice"},
    )
    assert mine.status_code == 200, mine.text
    client.app.state.observer.audit.flush()  # type: ignore[attr-defined]
    return World(client, db_url, keys, ids)


# ---------------------------------------------------------------------------------- the table


@dataclass(frozen=True, slots=True)
class Probe:
    """One call, made with the victim's id and with an id nobody holds (``{id}`` in the URL
    or in the body's strings stands for the id); ``ids`` names the pair (see ``_pairs``)."""

    url: str
    role: str  # whose key calls: acme's unless the name says otherwise
    ids: str
    refused: frozenset[int]  # the statuses the victim's id may get
    body: dict[str, Any] | None = None
    upload: bool = False


NF, FB, OK, MADE, QUEUED = (frozenset({s}) for s in (404, 403, 200, 201, 202))
ACL = {"principals": [], "public": True}
# Connector names, principal ids in a key or a group sync, and document ids in a push are
# namespaced by the caller's tenant: they answer as for an unused name and write only acme's.
PROBES: dict[tuple[str, str], tuple[Probe, ...]] = {
    ("PUT", "/v1/principals/{principal_id}/groups"): (
        Probe("/v1/principals/{id}/groups", "admin", "principal", OK, {"groups": []}),
    ),
    ("POST", "/v1/feedback"): (
        Probe("/v1/feedback", "alice", "chunk", NF, {"request_id": "r", "chunk_id": "{id}", "label": 1}),
        Probe("/v1/feedback", "alice", "doc", NF, {"request_id": "r", "external_id": "{id}", "label": 1}),
        Probe(
            "/v1/feedback",
            "alice",
            "request",
            OK,
            {"request_id": "{id}", "external_id": "acme-faq", "label": 1},
        ),
        Probe("/v1/feedback", "bob", "alice_chunk", NF, {"request_id": "r", "chunk_id": "{id}", "label": 1}),
        Probe(
            "/v1/feedback",
            "bob",
            "alice_request",
            OK,
            {"request_id": "{id}", "external_id": "acme-faq", "label": 1},
        ),
        Probe(
            "/v1/feedback",
            "portal",
            "principal",
            NF,
            {"request_id": "r", "external_id": "alice-notes", "label": 1, "as_principal": "{id}"},
        ),
    ),
    ("GET", "/v1/connectors/{connector}/state"): (
        Probe("/v1/connectors/{id}/state", "ingest", "connector", OK),
    ),
    ("PATCH", "/v1/connectors/{connector}/state"): (
        Probe(
            "/v1/connectors/{id}/state", "ingest", "connector", OK, {"remove_documents": ["board-minutes"]}
        ),
    ),
    ("DELETE", "/v1/connectors/{connector}/state"): (
        Probe("/v1/connectors/{id}/state", "ingest", "connector", OK),
    ),
    ("POST", "/v1/documents"): (
        Probe(
            "/v1/documents?connector={id}",
            "ingest",
            "connector",
            QUEUED,
            {"documents": [{"external_id": "gx-handbook", "text": "acme's own."}]},
        ),
    ),
    ("POST", "/v1/documents:upload"): (
        Probe("/v1/documents:upload?connector={id}", "ingest", "connector", QUEUED, upload=True),
    ),
    ("DELETE", "/v1/documents/{external_id}"): (
        Probe("/v1/documents/{id}", "ingest", "doc", NF),
        Probe("/v1/documents/{id}?connector=gx-sync", "ingest", "doc", NF),
    ),
    ("GET", "/v1/documents/{external_id}"): (
        Probe("/v1/documents/{id}", "alice", "doc", NF),
        Probe("/v1/documents/{id}", "bob", "alice_doc", NF),
        Probe("/v1/documents/board-minutes?as_principal={id}", "portal", "principal", NF),
        Probe("/v1/documents/alice-notes?as_principal={id}", "bob", "alice", FB),
    ),
    ("PUT", "/v1/documents/{external_id}/acl"): (
        Probe("/v1/documents/{id}/acl", "ingest", "doc", NF, ACL),
        Probe("/v1/documents/{id}/acl?connector=gx-sync", "ingest", "doc", NF, ACL),
    ),
    ("GET", "/v1/jobs/{job_id}"): (Probe("/v1/jobs/{id}", "ingest", "job", NF),),
    ("POST", "/v1/jobs/{job_id}:cancel"): (Probe("/v1/jobs/{id}:cancel", "ingest", "job", NF),),
    ("POST", "/v1/jobs/{job_id}:resume"): (Probe("/v1/jobs/{id}:resume", "admin", "job", NF),),
    ("POST", "/v1/retrieve"): (
        Probe("/v1/retrieve", "portal", "principal", OK, {"query": MARK, "as_principal": "{id}"}),
        Probe("/v1/retrieve", "bob", "alice", FB, {"query": MARK, "as_principal": "{id}"}),
    ),
    ("POST", "/v1/admin/retrieve"): (
        Probe("/v1/admin/retrieve", "admin", "principal", OK, {"query": MARK, "as_principal": "{id}"}),
    ),
    ("POST", "/v1/admin/explain"): (
        Probe("/v1/admin/explain", "admin", "doc", OK, {"external_id": "{id}", "as_principal": "user:alice"}),
        Probe("/v1/admin/explain", "admin", "chunk", OK, {"chunk_id": "{id}", "as_principal": "user:alice"}),
        Probe(
            "/v1/admin/explain", "admin", "principal", OK, {"external_id": "acme-faq", "as_principal": "{id}"}
        ),
    ),
    ("POST", "/v1/admin/keys"): (
        Probe("/v1/admin/keys", "admin", "principal", MADE, {"roles": ["query"], "principal_id": "{id}"}),
    ),
    ("POST", "/v1/admin/keys/{key_id}:revoke"): (Probe("/v1/admin/keys/{id}:revoke", "admin", "key", NF),),
    # The operator's deployment-wide routes: a tenant admin is refused whatever it names.
    ("POST", "/v1/admin/index/aliases/{alias}:swap"): (
        Probe("/v1/admin/index/aliases/{id}:swap", "admin", "alias", FB, {"version_id": "v-any"}),
    ),
    ("POST", "/v1/admin/index/aliases/{alias}:rollback"): (
        Probe("/v1/admin/index/aliases/{id}:rollback", "admin", "alias", FB),
    ),
    ("POST", "/v1/admin/index/versions/{version_id}:quality"): (
        Probe("/v1/admin/index/versions/{id}:quality", "admin", "version", FB),
    ),
    ("GET", "/v1/chunks/{chunk_id}"): (
        Probe("/v1/chunks/{id}", "alice", "chunk", NF),
        Probe("/v1/chunks/{id}", "bob", "alice_chunk", NF),
        Probe("/v1/chunks/ALICE_CHUNK?as_principal={id}", "portal", "principal", NF),
    ),
}


def _pairs(w: World) -> dict[str, tuple[str, str]]:
    """Per kind of id: (the victim's, one nobody holds, of the same shape)."""
    i = w.ids
    return {
        "doc": ("board-minutes", "no-such-doc"),
        "chunk": (i["g_chunk"], "0" * len(i["g_chunk"])),
        "job": (i["g_job"], "00000000-0000-4000-8000-000000000000"),
        "key": (i["g_key"], "0" * len(i["g_key"])),
        "principal": ("user:gina", "user:nobody-at-all"),
        "connector": ("gx-sync", "no-such-sync"),
        "request": (i["g_request"], "rid-nobody"),
        "alias": ("live", "no-alias"),
        "version": (i["version"], "v-nobody"),
        # another principal's, in the caller's own tenant
        "alice": ("user:alice", "user:nobody-at-all"),
        "alice_doc": ("alice-notes", "no-such-doc"),
        "alice_chunk": (i["alice_chunk"], "0" * len(i["alice_chunk"])),
        "alice_request": ("acme-rid-alice", "rid-nobody"),
    }


def _send(w: World, method: str, probe: Probe, id_: str) -> Response:
    url = probe.url.replace("{id}", id_).replace("ALICE_CHUNK", w.ids["alice_chunk"])
    headers = auth(w.keys[probe.role])
    if probe.upload:
        file = {"file": ("a.txt", b"acme's upload.", "text/plain")}
        return w.client.post(url, data={"external_id": "gx-handbook"}, files=file, headers=headers)
    body = None if probe.body is None else json.loads(json.dumps(probe.body).replace("{id}", id_))
    return w.client.request(method, url, json=body, headers=headers)


def _id_routes(app: Any) -> set[tuple[str, str]]:
    """Every (method, path) of the app whose path, query or body names an id."""
    spec = app.openapi()
    schemas = spec["components"]["schemas"]

    def fields(schema: dict[str, Any]) -> set[str]:
        if "$ref" in schema:
            return fields(schemas[schema["$ref"].rsplit("/", 1)[-1]])
        out = set(schema.get("properties", {}))
        for key in ("anyOf", "oneOf", "allOf"):
            for part in schema.get(key, []):
                out |= fields(part)
        return out

    routes = set()
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            names = {p["name"] for p in op.get("parameters", [])}
            for content in op.get("requestBody", {}).get("content", {}).values():
                names |= fields(content.get("schema", {}))
            if "{" in path or any(ID_FIELD.search(n) for n in names):
                routes.add((method.upper(), path))
    return routes


def _plain(resp: Response, theirs: str, nobodys: str) -> str:
    """The answer without what differs between any two calls, the victim's id read as nobody's."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in VOLATILE}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    try:
        body: Any = strip(resp.json())
    except ValueError:
        body = resp.text
    return f"{resp.status_code} {body}".replace(theirs, nobodys)


def _victim_rows(db_url: str) -> list[Any]:
    with psycopg.connect(db_url) as conn:
        return [
            conn.execute(sql, ("globex",)).fetchall()
            for sql in (
                "SELECT external_id, state, current_version, acl_public, acl_principals, connector"
                " FROM documents WHERE tenant_id = %s ORDER BY external_id",
                "SELECT principal_id, group_id FROM group_members WHERE tenant_id = %s ORDER BY 1, 2",
                "SELECT key_id, revoked_at FROM api_keys WHERE tenant_id = %s ORDER BY key_id",
                "SELECT job_id, state FROM jobs WHERE tenant_id = %s ORDER BY job_id",
                "SELECT connector, cursor FROM connector_state WHERE tenant_id = %s ORDER BY connector",
                "SELECT count(*) FROM feedback WHERE tenant_id = %s",
            )
        ]


def test_every_route_that_takes_an_id_is_probed(world: World) -> None:
    routes = _id_routes(world.client.app)
    assert routes - set(PROBES) == set(), "routes taking an id with no IDOR probe: add them to PROBES"
    assert set(PROBES) - routes == set(), "probes of routes the app no longer has"


def test_another_tenants_and_principals_ids_answer_as_nobodys(world: World) -> None:
    before = _victim_rows(world.db_url)
    pairs, checks = _pairs(world), 0
    leaks: list[str] = []
    for (method, path), probes in PROBES.items():
        for probe in probes:
            theirs, nobodys = pairs[probe.ids]
            mine, unknown = _send(world, method, probe, theirs), _send(world, method, probe, nobodys)
            where = f"{method} {path} ({probe.url} as {probe.role}, {probe.ids})"
            checks += 1
            if mine.status_code not in probe.refused:
                leaks.append(f"{where}: {mine.status_code} {mine.text[:160]}")
            if _plain(mine, theirs, nobodys) != _plain(unknown, theirs, nobodys):
                leaks.append(
                    f"{where}: answers unlike an unknown id: {mine.text[:160]} / {unknown.text[:160]}"
                )
            text = mine.text.lower()
            leaks += [f"{where}: the answer holds {m!r}" for m in VICTIM_MARKS if m in text]
    assert leaks == [], "\n".join(leaks)
    assert checks == sum(len(p) for p in PROBES.values()) >= 30
    assert _victim_rows(world.db_url) == before


def test_a_tenant_admin_sees_only_its_own_tenants_figures(world: World) -> None:
    """``/v1/admin/status``'s catalog position is one sequence all tenants advance, and admin
    retrieve's plan totals counted every tenant's vectors: neither reaches a tenant admin,
    and nothing in its status moves when another tenant works."""
    c, admin = world.client, auth(world.keys["admin"])
    mine = c.get("/v1/admin/status", headers=admin).json()
    assert mine["scope"] == "tenant" and mine["catalog_position"] is None
    extra = [{"external_id": f"gx-more-{n}", "text": f"{MARK}: more {n}."} for n in range(3)]
    push_and_wait(c, world.keys["g_ingest"], extra)
    again = c.get("/v1/admin/status", headers=admin).json()
    moved = ("catalog_position", "changes_since_build", "delta_chunks", "running_jobs", "shards", "capacity")
    assert {f: again[f] for f in moved} == {f: mine[f] for f in moved}
    deployment = c.get("/v1/admin/status", headers=auth(world.keys["operator"])).json()
    assert deployment["scope"] == "deployment" and deployment["catalog_position"] > 0
    searched = c.post("/v1/admin/retrieve", json={"query": MARK, "as_principal": "user:alice"}, headers=admin)
    assert searched.status_code == 200, searched.text
    plans = searched.json()["plans"]
    assert plans and all(set(plan) == {"shard", "strategy", "allowed"} for plan in plans)
    with psycopg.connect(world.db_url) as conn:
        acme_chunks = conn.execute(
            "SELECT count(*) FROM chunks c JOIN documents d USING (doc_id) WHERE d.tenant_id = 'acme'"
        ).fetchone()
    assert acme_chunks is not None and sum(plan["allowed"] for plan in plans) <= acme_chunks[0]


def test_feedback_binds_only_the_callers_own_request(world: World) -> None:
    """Request ids are the client's (``X-Request-ID`` is kept): feedback takes the query text of
    the caller's own retrieve under that id, never another principal's, whether the other
    used the id first or planted it after."""
    c = world.client

    def ask(role: str, rid: str, query: str) -> None:
        r = c.post(
            "/v1/retrieve", json={"query": query}, headers={**auth(world.keys[role]), "X-Request-ID": rid}
        )
        assert r.status_code == 200 and r.json()["request_id"] == rid, r.text

    def judge(role: str, rid: str, **extra: str) -> dict[str, Any]:
        body = {"request_id": rid, "external_id": "acme-faq", "label": 2, **extra}
        r = c.post("/v1/feedback", json=body, headers=auth(world.keys[role]))
        assert r.status_code == 200, r.text
        return r.json()

    ask("alice", "rid-shared", f"{MARK} alice asks")
    ask("bob", "rid-shared", f"{MARK} bob plants")  # the same id, used after alice
    ask("alice", "rid-alice-only", f"{MARK} alice alone")
    ask("portal", "rid-portal", f"{MARK} portal for itself")
    c.app.state.observer.audit.flush()  # type: ignore[attr-defined]
    assert judge("alice", "rid-shared")["query_stored"] is True
    assert judge("bob", "rid-alice-only")["query_stored"] is False
    assert judge("bob", "rid-shared")["query_stored"] is True
    # the delegating key's own retrieve was not for alice
    assert judge("portal", "rid-portal", as_principal="user:alice")["query_stored"] is False
    with psycopg.connect(world.db_url) as conn:
        stored = conn.execute(
            "SELECT principal_id, request_id, query FROM feedback WHERE tenant_id = 'acme'"
            " AND request_id IN ('rid-shared', 'rid-alice-only', 'rid-portal') ORDER BY feedback_id"
        ).fetchall()
    assert stored == [
        ("user:alice", "rid-shared", f"{MARK} alice asks"),
        ("user:bob", "rid-alice-only", None),
        ("user:bob", "rid-shared", f"{MARK} bob plants"),
        ("user:alice", "rid-portal", None),
    ]

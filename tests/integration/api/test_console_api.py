"""The operator console's admin API on the real app, PostgreSQL and embedding model:
"why not?" reasons, search as any principal, keys, job resume and index administration."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.console_schemas import DebugRetrieveOut, ExplainOut, IndexOut, KeyCreatedOut, QualityOut
from catalog import jobs as jobs_repo
from catalog import principals as principals_repo
from catalog.reembed import write_gate_report
from core.settings import Settings
from jobs.rebuild_job import rebuild
from tests import factories
from tests.integration.api.conftest import make_key, push_and_wait, wait_job

pytestmark = pytest.mark.integration

PAY = "Salary bands and compensation ranges for every engineering level are reviewed each spring."
OFFICE = "The office opens at eight and the kitchen is restocked on Mondays."


def _auth(t: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {t}"}


def _groups(db_url: str, principal: str, groups: list[str], tenant: str = "acme") -> None:
    with psycopg.connect(db_url) as conn:
        principals_repo.replace_groups(conn, tenant_id=tenant, principal_id=principal, groups=groups)


@pytest.fixture
def seeded(full_client: TestClient, db_url: str) -> dict[str, str]:
    keys = {
        "admin": make_key(db_url, "acme", ["admin"], principal="user:root"),
        "operator": make_key(db_url, "operator", ["operator"], principal="service:ops"),
        "ingest": make_key(db_url, "acme", ["ingest"]),
        "query": make_key(db_url, "acme", ["query"], principal="user:bob"),
        "other": make_key(db_url, "globex", ["ingest"]),
    }
    _groups(db_url, "user:alice", ["group:hr"])
    _groups(db_url, "user:bob", ["group:eng"])
    push_and_wait(
        full_client,
        keys["ingest"],
        [
            {
                "external_id": "pay",
                "text": PAY,
                "metadata": {"team": "hr"},
                "acl": {"principals": ["group:hr"]},
            },
            {"external_id": "office", "text": OFFICE, "acl": {"public": True}},
            {"external_id": "gone", "text": "A retired runbook about tape backups.", "acl": {"public": True}},
        ],
    )
    push_and_wait(
        full_client,
        keys["other"],
        [{"external_id": "globex-only", "text": "Globex plans.", "acl": {"public": True}}],
    )
    assert full_client.delete("/v1/documents/gone", headers=_auth(keys["ingest"])).status_code == 200
    return keys


def _explain(client: TestClient, admin: str, **body: object) -> ExplainOut:
    resp = client.post("/v1/admin/explain", json=body, headers=_auth(admin))
    assert resp.status_code == 200, resp.text
    assert PAY not in resp.text and OFFICE not in resp.text  # never any document text
    return ExplainOut.model_validate(resp.json())


def test_explain_reasons_from_the_catalog(full_client: TestClient, seeded: dict[str, str]) -> None:
    admin = seeded["admin"]
    hidden = _explain(full_client, admin, external_id="pay", as_principal="user:bob", query="salary bands")
    assert not hidden.visible and hidden.reasons[0] == "not_in_acl" and hidden.rank is None
    assert hidden.granting_groups == ["group:hr"] and hidden.principal.groups == ["group:eng"]
    # no index version is built: everything visible is served from the delta, and ranked
    shown = _explain(full_client, admin, external_id="pay", as_principal="user:alice", query="salary bands")
    assert shown.visible and shown.rank == 1 and "in_delta" in shown.reasons and shown.delta_chunks >= 1
    assert _explain(full_client, admin, external_id="gone", as_principal="user:bob").reasons == ["deleted"]
    # Another tenant's id answers exactly as one that does not exist: no existence oracle.
    other = _explain(full_client, admin, external_id="globex-only", as_principal="user:bob")
    nope = _explain(full_client, admin, external_id="nope", as_principal="user:bob")
    assert nope.reasons == ["not_found"]
    assert other.model_copy(update={"external_id": "nope"}) == nope
    filtered = _explain(
        full_client,
        admin,
        external_id="pay",
        as_principal="user:alice",
        filters={"metadata": {"team": "eng"}},
    )
    assert (
        not filtered.visible and "filtered" in filtered.reasons and filtered.filtered_by == ["metadata.team"]
    )
    # a chunk of an older version is superseded by the current one
    old = full_client.post(
        "/v1/admin/retrieve",
        json={"query": "salary bands", "as_principal": "user:alice", "top_k": 1},
        headers=_auth(admin),
    ).json()["results"][0]["chunk_id"]
    push_and_wait(
        full_client,
        seeded["ingest"],
        [{"external_id": "pay", "text": "Pay is reviewed yearly.", "acl": {"principals": ["group:hr"]}}],
    )
    sup = _explain(full_client, admin, chunk_id=old, as_principal="user:alice")
    assert not sup.visible and sup.reasons == ["superseded"] and sup.superseded_by == 2
    below = _explain(
        full_client, admin, external_id="office", as_principal="user:alice", query="xylophone zebra"
    )
    assert below.visible  # visible; its rank (or below_top_k) comes from the real ranking
    assert below.rank is not None or "below_top_k" in below.reasons
    # admin only, and well-formed input only
    for key in (seeded["query"], seeded["ingest"]):
        r = full_client.post(
            "/v1/admin/explain", json={"external_id": "pay", "as_principal": "user:bob"}, headers=_auth(key)
        )
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    bad = full_client.post("/v1/admin/explain", json={"as_principal": "user:bob"}, headers=_auth(admin))
    assert bad.status_code == 422


def test_search_as_principal_with_stage_details(full_client: TestClient, seeded: dict[str, str]) -> None:
    admin = seeded["admin"]

    def search(principal: str) -> DebugRetrieveOut:
        r = full_client.post(
            "/v1/admin/retrieve",
            json={"query": "salary compensation bands", "as_principal": principal, "top_k": 5},
            headers=_auth(admin),
        )
        assert r.status_code == 200, r.text
        return DebugRetrieveOut.model_validate(r.json())

    alice, bob = search("user:alice"), search("user:bob")
    assert alice.results[0].document_external_id == "pay" and alice.principal.groups == ["group:hr"]
    assert "pay" not in {r.document_external_id for r in bob.results} and PAY not in bob.model_dump_json()
    top = alice.results[0]
    assert top.ranks["fused"] == 1 and set(top.found_by) <= {"dense", "lexical"} and top.found_by
    assert all(top.ranks[s] >= 1 for s in top.found_by) and alice.model
    # the delegation rules are unchanged: a plain query key may not act as someone else
    r = full_client.post(
        "/v1/retrieve", json={"query": "salary", "as_principal": "user:alice"}, headers=_auth(seeded["query"])
    )
    assert r.status_code == 403
    r = full_client.post(
        "/v1/admin/retrieve",
        json={"query": "salary", "as_principal": "user:alice"},
        headers=_auth(seeded["query"]),
    )
    assert r.status_code == 403


def test_every_admin_search_is_audited_like_a_retrieve(
    full_client: TestClient, db_url: str, seeded: dict[str, str]
) -> None:
    """Searching as the admin itself or as another principal: each leaves one entry with the
    actor, the principal searched as, the filters, the chunk ids returned and the version."""
    admin = seeded["admin"]
    asked: list[dict[str, Any]] = [
        {"query": "salary compensation bands", "as_principal": "user:alice", "top_k": 3},
        {"query": "kitchen", "filters": {"metadata": {"team": ["hr", "eng"]}}, "mode": "lexical"},
    ]
    answers = []
    for body in asked:
        r = full_client.post("/v1/admin/retrieve", json=body, headers=_auth(admin))
        assert r.status_code == 200, r.text
        answers.append(r.json())
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT actor, tenant_id, target, details FROM audit_log WHERE action = 'admin.retrieve'"
            " ORDER BY seq"
        ).fetchall()
    assert len(rows) == len(asked)
    for (actor, tenant, target, details), body, out in zip(rows, asked, answers, strict=True):
        searched_as = body.get("as_principal", "user:root")
        assert actor == "user:root" and tenant == "acme" and target == out["request_id"]
        assert details["on_behalf_of"] == searched_as
        assert details["chunk_ids"] == [r["chunk_id"] for r in out["results"]]
        assert details["index_version"] == out["index_version"]
        assert details["filters"] == body.get("filters", {})
        assert details["mode"] == body.get("mode", "hybrid") and details["model"] == out["model"]
    assert answers[0]["results"]  # alice's search returned something to record


def test_keys_principals_and_job_resume(full_client: TestClient, db_url: str, seeded: dict[str, str]) -> None:
    admin = seeded["admin"]
    made = full_client.post(
        "/v1/admin/keys",
        json={"roles": ["query"], "principal_id": "user:carol", "name": "c"},
        headers=_auth(admin),
    )
    assert made.status_code == 201, made.text
    created = KeyCreatedOut.model_validate(made.json())
    listed = full_client.get("/v1/admin/keys", headers=_auth(admin))
    assert (
        created.key.key_id in listed.text and created.token not in listed.text and "hash" not in listed.text
    )
    assert full_client.get("/v1/admin/keys", headers=_auth(created.token)).status_code == 403
    principals = full_client.get("/v1/admin/principals", headers=_auth(admin)).json()
    assert {"principal_id": "user:alice", "groups": ["group:hr"]}.items() <= next(
        p for p in principals if p["principal_id"] == "user:alice"
    ).items()
    other = make_key(db_url, "globex", ["query"])
    other_id = other.split("_")[1]
    assert full_client.post(f"/v1/admin/keys/{other_id}:revoke", headers=_auth(admin)).status_code == 404
    revoked = full_client.post(f"/v1/admin/keys/{created.key.key_id}:revoke", headers=_auth(admin))
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    # a job cancelled before it ran resumes and finishes (its payload was kept)
    with psycopg.connect(db_url) as conn:
        job_id = jobs_repo.create_job(
            conn,
            tenant_id="acme",
            kind="ingest",
            items=[
                jobs_repo.NewItem(external_id="late", mime_type="text/plain", payload=b"Late arrival text.")
            ],
        )
    ingest = seeded["ingest"]
    cancelled = full_client.post(f"/v1/jobs/{job_id}:cancel", headers=_auth(ingest)).json()
    assert cancelled["state"] == "cancelled"
    resumed = full_client.post(f"/v1/jobs/{job_id}:resume", headers=_auth(ingest))
    assert resumed.status_code == 200 and resumed.json()["state"] == "queued"
    assert wait_job(full_client, ingest, str(job_id))["state"] == "succeeded"
    again = full_client.post(f"/v1/jobs/{job_id}:resume", headers=_auth(ingest))
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
    assert full_client.post(f"/v1/jobs/{uuid.uuid4()}:resume", headers=_auth(ingest)).status_code == 404


def test_index_swap_rollback_quality_gc(
    full_client: TestClient, db_url: str, tmp_path: Path, seeded: dict[str, str]
) -> None:
    admin = seeded["operator"]
    config = factories.rebuild(index_root=tmp_path / "indexes", n_shards=2, flat_max_vectors=1)
    v1, v2 = rebuild(db_url, config), rebuild(db_url, config)

    def post(path: str, **body: object) -> dict:
        r = full_client.post(path, json=body or None, headers=_auth(admin))
        assert r.status_code == 200, r.text
        return r.json()

    assert post("/v1/admin/index/aliases/live:swap", version_id=v1)["serving"] == v1
    assert post("/v1/admin/index/aliases/live:swap", version_id=v2)["serving"] == v2
    gate = {"passed": False, "index_quality": {"passed": True, "min_recall_at_10": 0.97}}
    with psycopg.connect(db_url) as conn:  # what a model migration leaves on its target version
        write_gate_report(conn, version_id=v2, gate=gate)
    overview = IndexOut.model_validate(full_client.get("/v1/admin/index", headers=_auth(admin)).json())
    by_id = {v.version_id: v for v in overview.versions}
    assert by_id[v2].gate == gate and by_id[v1].gate is None
    assert by_id[v2].aliases == ["live"] and by_id[v1].rollback_of == ["live"]
    assert by_id[v2].chunks >= 2 and by_id[v2].shards == 2 and by_id[v2].kinds and by_id[v2].hidden == 0
    assert overview.serving is not None and overview.serving.version_id == v2
    back = post("/v1/admin/index/aliases/live:rollback")
    assert back == {"alias": "live", "previous": v2, "current": v1, "serving": v1}
    quality = QualityOut.model_validate(post(f"/v1/admin/index/versions/{v1}:quality"))
    assert quality.k == 10 and len(quality.shards) == 2
    assert all(s.recall is None or 0.0 <= s.recall <= 1.0 for s in quality.shards)
    assert quality.min_recall is not None and quality.min_recall > 0.5
    missing = full_client.post(
        "/v1/admin/index/aliases/live:swap", json={"version_id": "v-x"}, headers=_auth(admin)
    )
    assert missing.status_code == 404
    gc = post("/v1/admin/index:gc")
    assert gc["deleted"] == [] and {k["version_id"] for k in gc["kept"]} == {v1, v2}
    for tenant_key in ("ingest", "admin"):  # index versions are the operator's, not a tenant's
        assert full_client.get("/v1/admin/index", headers=_auth(seeded[tenant_key])).status_code == 403


def test_console_page_and_assets(foundation_client: TestClient) -> None:
    redirect = foundation_client.get("/console", follow_redirects=False)
    assert redirect.status_code == 308 and redirect.headers["location"] == "console/"
    page = foundation_client.get("/console/")
    csp = page.headers["content-security-policy"]
    assert page.status_code == 200 and "default-src 'self'" in csp and "script-src 'self'" in csp
    assert "unsafe" not in csp and "<script>" not in page.text and 'src="assets/console.js"' in page.text
    js = foundation_client.get("/console/assets/console.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert "innerHTML" not in js.text.replace("never innerHTML", "")
    assert js.headers["x-content-type-options"] == "nosniff" and "set-cookie" not in js.headers
    assert foundation_client.get("/console/assets/index.html").status_code == 404
    assert foundation_client.get("/console/assets/..%2Fapp.py").status_code == 404


def test_the_query_boxes_take_the_apis_query_limit(db_url: str, tmp_path: Path) -> None:
    """The console's search and explain boxes allow what the API allows: the one limit
    (``api.max_query_chars``), here lowered, so the app is this test's own."""
    settings = Settings(data_dir=tmp_path, database_url=db_url, api={"max_query_chars": 300})
    with TestClient(create_app(settings, hooks=[])) as client:
        page = client.get("/console/").text
        admin = make_key(db_url, "acme", ["admin"], principal="user:root")
        too_long = "q" * 301
        searched = client.post(
            "/v1/admin/retrieve", json={"query": too_long, "as_principal": "user:bob"}, headers=_auth(admin)
        )
        explained = client.post(
            "/v1/admin/explain",
            json={"external_id": "pay", "as_principal": "user:bob", "query": too_long},
            headers=_auth(admin),
        )
    assert '<input id="q" name="query" required maxlength="300">' in page
    assert '<input id="x-query" name="query" maxlength="300">' in page
    assert "{max_query_chars}" not in page
    assert searched.status_code == 422 and explained.status_code == 422, (searched.text, explained.text)
    assert "300" in explained.text


def test_console_model_examples_validate() -> None:
    from api import console_schemas as cs

    models = (cs.DebugRetrieveOut, cs.ExplainOut, cs.PrincipalOut, cs.KeyOut, cs.KeyCreatedOut, cs.IndexOut)
    for model in (*models, cs.SwapOut, cs.QualityOut, cs.GcOut):
        for example in model.model_config["json_schema_extra"]["examples"]:  # type: ignore[index, union-attr]
            model.model_validate(example)

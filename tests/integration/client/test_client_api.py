"""Every client method against a real server: push in batches, wait with progress, jobs,
retrieve, ACLs, groups, delete, upload, connector state, error mapping; and the async client.
One server for the module, a tenant per test (``live_tenant``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from ragline_client import AsyncClient, Client, DocumentIn, JobOut, RaglineError
from ragline_client.models import AclIn, ConnectorStateUpdate
from tests.integration.client.conftest import CountingTransport, LiveServer

pytestmark = pytest.mark.integration

DOCS = [
    DocumentIn(
        external_id="keys",
        title="Key rotation",
        text="# Rotating signing keys\n\nCreate a new key pair in the vault, publish the public key,"
        " then retire the old key after one day.",
        mime_type="text/markdown",
        metadata={"team": "infra"},
        acl=AclIn(principals=["group:eng"]),
    ),
    DocumentIn(
        external_id="lunch",
        text="Monday: soup. Tuesday: pasta with tomato sauce. Wednesday: fish and chips.",
        acl=AclIn(public=True),
    ),
    DocumentIn(
        external_id="salaries",
        text="Confidential salary bands for signing bonus and key staff retention.",
        acl=AclIn(principals=["user:hr-lead"]),
    ),
]


def _ids(client: Client, query: str, **kw: object) -> list[str]:
    return [r.document_external_id for r in client.retrieve(query, **kw).results]  # type: ignore[arg-type]


def test_every_method_against_a_real_server(live_tenant: LiveServer, tmp_path: Path) -> None:
    transport = CountingTransport()
    ingest = Client(live_tenant.url, live_tenant.key("ingest"), transport=transport)
    alice = Client(live_tenant.url, live_tenant.key("query", principal="user:alice"))
    admin = Client(live_tenant.url, live_tenant.key("admin"))
    assert ingest.health().status == "ok"
    assert ingest.ready().status == "ready"
    me = ingest.me()
    assert (me.tenant_id, me.roles, me.limits.max_batch_documents) == (live_tenant.tenant, ["ingest"], 2)

    # Three documents over a batch limit of 2: two batches, two jobs.
    pushed = ingest.push(DOCS)
    assert pushed.accepted == 3 and pushed.rejections == [] and len(pushed.job_ids) == 2
    assert transport.sent.count("POST /v1/documents") == 2
    seen: list[JobOut] = []
    for job_id in pushed.job_ids:
        done = ingest.wait(job_id, timeout=120, on_progress=seen.append)
        assert done.state == "succeeded" and done.chunks >= 1
    assert seen and seen[-1].state == "succeeded"
    assert ingest.job(pushed.job_ids[0]).job_id == pushed.job_ids[0]
    assert {j.job_id for j in ingest.jobs(state="succeeded")} >= set(pushed.job_ids)
    assert ingest.cancel(pushed.job_ids[0]).state == "succeeded"  # finished: cancel changes nothing

    # Retrieval through the ACL filter; groups and ACL changes take effect at once.
    assert _ids(alice, "how do I rotate signing keys?") == ["lunch"]
    assert admin.set_groups("user:alice", ["group:eng"]).groups == ["group:eng"]
    hits = alice.retrieve("how do I rotate signing keys?", top_k=2, mode="hybrid")
    assert hits.results[0].document_external_id == "keys" and len(hits.results) <= 2
    assert hits.fusion is not None and hits.fusion.method == "rrf"
    judged = alice.feedback(hits.request_id, 3, chunk_id=hits.results[0].chunk_id)
    assert (judged.grade, judged.query_stored) == (3, False)
    with pytest.raises(RaglineError) as hidden:  # a document alice cannot read is not found
        alice.feedback(hits.request_id, "relevant", external_id="salaries")
    assert hidden.value.status == 404
    # A tenant admin judges as the principal searched for (the console's search-as)
    as_alice = admin.feedback(
        hits.request_id, 0, chunk_id=hits.results[0].chunk_id, as_principal="user:alice"
    )
    assert as_alice.grade == 0
    tuned = alice.retrieve("rotate signing keys", fusion={"method": "convex", "weights": {"dense": 0.3}})
    assert tuned.fusion is not None and (tuned.fusion.method, tuned.fusion.weights["dense"]) == (
        "convex",
        0.3,
    )
    with pytest.raises(ValidationError):  # checked before it leaves the client
        alice.retrieve("rotate signing keys", fusion={"method": "linear"})
    assert _ids(alice, "rotate keys", filters={"metadata": {"team": "infra"}}) == ["keys"]
    assert ingest.set_acl("keys", ["user:bob"]).acl.principals == ["user:bob"]
    assert "keys" not in _ids(alice, "how do I rotate signing keys?")
    assert ingest.delete("lunch").deleted is True
    assert _ids(alice, "soup pasta fish") == []

    # A large file goes as a streamed upload.
    page = tmp_path / "runbook.md"
    page.write_text("# Failover\n\nPromote the standby with pg_ctl promote, then repoint the pooler.\n")
    up = ingest.upload(page, acl=AclIn(public=True))
    assert up.accepted == 1 and up.job_id and up.job_ids == [up.job_id]  # push()'s answer
    assert ingest.wait(up.job_id, timeout=120).state == "succeeded"
    assert "runbook.md" in _ids(alice, "promote the standby pooler")
    # No suffix and no mime_type: the server detects plain text instead of refusing.
    notes = tmp_path / "NOTES"
    notes.write_text("Rotate the turbine bearings every spring.\n")
    assert (
        ingest.wait(ingest.upload(notes, acl=AclIn(public=True)).job_ids[0], timeout=120).state == "succeeded"
    )
    with pytest.raises(RaglineError) as refused:
        ingest.upload(notes, mime_type="application/msword")
    assert refused.value.code == "unsupported_type"

    # Connector state: merged, read back, reset.
    saved = ingest.save_connector_state(
        "demo", ConnectorStateUpdate(cursor="c1", set_documents={"a": "f1", "b": "f2"})
    )
    assert (saved.cursor, saved.documents) == ("c1", 2)
    ingest.save_connector_state(
        "demo", ConnectorStateUpdate(remove_documents=["a"], set_groups={"user:x": "g"})
    )
    state = ingest.connector_state("demo")
    assert (state.cursor, state.documents, state.groups) == ("c1", {"b": "f2"}, {"user:x": "g"})
    other_tenant = Client(live_tenant.url, live_tenant.key("ingest", tenant="globex"))
    assert other_tenant.connector_state("demo").documents == {}  # state is per tenant, from the key
    assert ingest.reset_connector_state("demo").documents == {}
    assert ingest.connector_state("demo").cursor is None


def test_retried_push_never_duplicates(live_tenant: LiveServer) -> None:
    """The same batch twice (a retry after a lost answer): the second job finds every document
    unchanged by content hash and no document gains a version."""
    client = Client(live_tenant.url, live_tenant.key("ingest"))
    for attempt in range(2):
        result = client.push(DOCS[:2])
        jobs = [client.wait(j, timeout=120) for j in result.job_ids]
        assert sum(j.documents.unchanged for j in jobs) == (0 if attempt == 0 else 2)
    assert [live_tenant.versions(d.external_id) for d in DOCS[:2]] == [1, 1]


def test_errors_carry_code_and_request_id(live_tenant: LiveServer) -> None:
    query_only = Client(live_tenant.url, live_tenant.key("query"))
    with pytest.raises(RaglineError) as denied:
        query_only.push(DOCS[:1])
    assert (denied.value.code, denied.value.status) == ("forbidden", 403)
    assert denied.value.request_id
    ingest = Client(live_tenant.url, live_tenant.key("ingest"))
    with pytest.raises(RaglineError) as missing:
        ingest.delete("never-pushed")
    assert (missing.value.code, missing.value.status) == ("not_found", 404)
    # The shared models catch a malformed ACL before it is sent...
    with pytest.raises(ValidationError):
        ingest.set_acl("x", ["not-a-principal"])
    # ...and the limits only the server knows come back as 422 with the fields at fault.
    reader = Client(live_tenant.url, live_tenant.key("query"))
    with pytest.raises(RaglineError) as bad:
        reader.retrieve("anything", top_k=100_000)
    assert (bad.value.code, bad.value.status) == ("invalid_request", 422)
    assert [d.loc[-1] for d in bad.value.details] == ["top_k"]
    with pytest.raises(RaglineError) as unknown:
        Client(live_tenant.url, "rk_nope").me()
    assert unknown.value.code == "unauthenticated"


def test_async_client(live_tenant: LiveServer) -> None:
    async def scenario() -> list[str]:
        async with AsyncClient(live_tenant.url, live_tenant.key("ingest")) as ingest:
            me = await ingest.me()
            assert me.limits.max_batch_documents == 2
            result = await ingest.push(DOCS[1:2])
            job = await ingest.wait(result.job_ids[0], timeout=120)
            assert job.state == "succeeded"
            assert (await ingest.job(job.job_id)).job_id == job.job_id
        async with AsyncClient(live_tenant.url, live_tenant.key("query", principal="user:z")) as reader:
            found = await reader.retrieve("soup pasta", top_k=3)
            return [r.document_external_id for r in found.results]

    assert asyncio.run(scenario()) == ["lunch"]


def test_the_readme_python_client_example_runs_as_written(live_tenant: LiveServer) -> None:
    """The "Python client" example in README.md, run as written with the two keys `make run`
    prints: the ingest key pushes and waits, the query key (a member of ``group:eng``, as
    ``user:demo`` is in `make run`) retrieves the document through the ``source`` filter."""
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    section = readme.split("## Python client", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    with Client(live_tenant.url, live_tenant.key("admin")) as admin:
        admin.set_groups("user:demo", ["group:eng"])
    names: dict[str, Any] = {
        "ingest_key": live_tenant.key("ingest"),
        "query_key": live_tenant.key("query", principal="user:demo"),
    }
    exec(compile(code.replace("http://localhost:8000", live_tenant.url), "README.md", "exec"), names)
    assert names["job"].state == "succeeded"
    assert [hit.document_external_id for hit in names["hits"].results] == ["kb-1"]

"""Connectors own the ids they push: two filesystem folders synced into one tenant, both
holding ``readme.txt``, never delete or overwrite each other's documents, whatever their
sync state claims; the server refuses a connector's delete, ACL change or overwrite of a
document another connector wrote, while plain API pushes work as before."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import psycopg
import pytest

from catalog import jobs as jobs_repo
from cli.connect import AclMap, FsConnector
from core.records import Acl
from ragline_client import Client, DocumentIn, RaglineError, Syncer
from ragline_client.models import AclIn, ConnectorStateUpdate
from tests.integration.client.conftest import LiveServer

pytestmark = pytest.mark.integration

A_README = "Alpha team readme: the alpha deploys go out on Tuesdays after the freeze review.\n"
B_README = "Beta team readme: beta builds run nightly on the arm64 runners in the basement.\n"


def _folders(tmp_path: Path) -> tuple[Path, Path, AclMap]:
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    (a / "readme.txt").write_text(A_README)
    (a / "alpha.md").write_text("# Alpha\n\nAlpha escalations page the on-call lead first.\n")
    (b / "readme.txt").write_text(B_README)
    (b / "beta.md").write_text("# Beta\n\nBeta incidents are tracked on the blue board.\n")
    rules = tmp_path / "map.json"
    rules.write_text(json.dumps({"*": {"public": True}}))
    return a, b, AclMap.load(rules)


def _ids(client: Client, query: str) -> list[str]:
    return [r.document_external_id for r in client.retrieve(query).results]


def _owner(server: LiveServer, external_id: str) -> str | None:
    with psycopg.connect(server.db_url) as conn:
        row = conn.execute(
            "SELECT connector FROM documents WHERE tenant_id = 'acme' AND external_id = %s", (external_id,)
        ).fetchone()
    return None if row is None else row[0]


def test_two_folders_with_overlapping_paths_never_delete_each_other(
    live_server: LiveServer, tmp_path: Path
) -> None:
    a, b, rules = _folders(tmp_path)
    client = Client(live_server.url, live_server.key("ingest"))
    reader = Client(live_server.url, live_server.key("query", principal="user:ann"))
    conn_a = FsConnector(a, name="fs-a", acl_map=rules)
    conn_b = FsConnector(b, name="fs-b", acl_map=rules)

    assert Syncer(client, conn_a).run().summary()["pushed"] == 2
    # B's readme.txt would overwrite A's: refused for that document, the rest goes in.
    second = Syncer(client, conn_b).run()
    assert (second.pushed, second.failed) == (1, 1)
    assert "owned_by_other_connector" in second.errors["readme.txt"]
    assert "fs-a" in second.errors["readme.txt"]
    assert "readme.txt" not in client.connector_state("fs-b").documents
    assert _ids(reader, "alpha deploys Tuesdays freeze review")[0] == "readme.txt"

    # A state claiming A's id with another ACL: B's ACL change is refused and B forgets the id.
    digest = hashlib.sha256(B_README.encode()).hexdigest()
    client.save_connector_state(
        "fs-b", ConnectorStateUpdate(set_documents={"readme.txt": f"sha256:{digest}|acl:x"})
    )
    acl = Syncer(client, conn_b).run()
    assert (acl.acl_updated, acl.failed) == (0, 1) and "not_owned_by_connector" in acl.errors["readme.txt"]
    assert "readme.txt" not in client.connector_state("fs-b").documents

    # The reported defect: B's file goes; B's sync must not delete A's document.
    (b / "readme.txt").unlink()
    third = Syncer(client, conn_b).run()
    assert (third.deleted, third.failed) == (0, 0)
    # Even a sync state that claims A's id (a buggy connector, or state from before owners
    # were recorded) cannot delete it: the server refuses, and B forgets the id.
    client.save_connector_state("fs-b", ConnectorStateUpdate(set_documents={"readme.txt": "sha256:x|acl:y"}))
    claimed = Syncer(client, conn_b).run()
    assert (claimed.deleted, claimed.failed) == (0, 0)
    assert "readme.txt" not in client.connector_state("fs-b").documents
    (b / "beta.md").unlink()
    assert Syncer(client, conn_b).run().deleted == 1

    # A's documents survive, stay retrievable, and A's next sync finds them unchanged.
    assert _ids(reader, "alpha deploys Tuesdays freeze review")[0] == "readme.txt"
    assert "alpha.md" in _ids(reader, "alpha escalations on-call lead")
    assert "beta.md" not in _ids(reader, "beta incidents blue board")
    assert _owner(live_server, "readme.txt") == "fs-a"
    assert Syncer(client, conn_a).run().summary() == {
        "pushed": 0,
        "unchanged": 2,
        "deleted": 0,
        "acl_updated": 0,
        "groups_synced": 0,
        "failed": 0,
        "still_failing": 0,
    }


def test_server_refuses_a_connector_touching_another_connectors_document(live_server: LiveServer) -> None:
    client = Client(live_server.url, live_server.key("ingest"))
    reader = Client(live_server.url, live_server.key("query", principal="user:ann"))
    doc = DocumentIn(
        external_id="shared.txt", text="The shared runbook lives in the wiki.", acl=AclIn(public=True)
    )
    first = client.push([doc], connector="fs-a")
    assert first.accepted == 1
    client.wait(first.job_ids[0], timeout=120)

    for attempt in (
        lambda: client.delete("shared.txt", connector="fs-b"),
        lambda: client.set_acl("shared.txt", ["user:mallory"], connector="fs-b"),
    ):
        with pytest.raises(RaglineError) as refused:
            attempt()
        assert (refused.value.status, refused.value.code) == (409, "not_owned_by_connector")

    # An overwrite under another connector's name: a per-document rejection, the rest goes in.
    other = DocumentIn(external_id="other.txt", text="Unrelated notes.", acl=AclIn(public=True))
    replaced = DocumentIn(external_id="shared.txt", text="Replaced!", acl=AclIn(public=True))
    result = client.push([replaced, other], connector="fs-b")
    assert result.accepted == 1
    assert [(r.index, r.code) for r in result.rejections] == [(0, "owned_by_other_connector")]
    # A batch all of whose documents are refused is that batch's rejections, not an error.
    alone = client.push([replaced], connector="fs-b")
    assert (alone.accepted, alone.job_ids) == (0, [])
    assert [(r.index, r.code) for r in alone.rejections] == [(0, "owned_by_other_connector")]
    for job_id in result.job_ids:
        client.wait(job_id, timeout=120)
    assert _ids(reader, "shared runbook wiki")[0] == "shared.txt"
    assert live_server.versions("shared.txt") == 1
    assert _owner(live_server, "shared.txt") == "fs-a"

    # The owner itself may change and delete it; plain pushes work as before and leave a
    # live document's owner as it is.
    client.set_acl("shared.txt", ["group:eng"], public=True, connector="fs-a")
    plain = client.push(
        [DocumentIn(external_id="shared.txt", text="Edited by hand.", acl=AclIn(public=True))]
    )
    client.wait(plain.job_ids[0], timeout=120)
    assert live_server.versions("shared.txt") == 2 and _owner(live_server, "shared.txt") == "fs-a"
    assert client.delete("shared.txt", connector="fs-a").deleted
    assert "shared.txt" not in _ids(reader, "edited by hand")

    # A document a plain push wrote is unowned: the first connector to push it claims it
    # (content unchanged or not), and from then on it is that connector's alone.
    manual = DocumentIn(external_id="manual.txt", text="Pushed by hand first.", acl=AclIn(public=True))
    client.wait(client.push([manual]).job_ids[0], timeout=120)
    assert _owner(live_server, "manual.txt") is None
    claim = client.push([manual], connector="fs-b")
    assert client.wait(claim.job_ids[0], timeout=120).documents.unchanged == 1
    assert _owner(live_server, "manual.txt") == "fs-b"
    assert client.push([manual], connector="fs-a").rejections[0].code == "owned_by_other_connector"


def test_the_job_checks_ownership_again_under_the_row_lock(live_server: LiveServer) -> None:
    """Two connectors' pushes of one id queued before either ran: the push-time check passes
    both; the job refuses the second as a per-document error and the first's version stays."""
    client = Client(live_server.url, live_server.key("ingest"))
    first = client.push(
        [DocumentIn(external_id="race.txt", text="The first connector wrote this.", acl=AclIn(public=True))],
        connector="fs-a",
    )
    client.wait(first.job_ids[0], timeout=120)
    # The second push passed the push-time check before the first committed: replay it as
    # the job it would have become, bypassing that check.
    with psycopg.connect(live_server.db_url) as conn:
        job_id = jobs_repo.create_job(
            conn,
            tenant_id="acme",
            kind="ingest",
            items=[
                jobs_repo.NewItem(
                    external_id="race.txt",
                    mime_type="text/plain",
                    payload=b"The second connector overwrote this.",
                    acl=Acl((), True),
                    byte_size=36,
                    connector="fs-b",
                )
            ],
        )
    # Any push wakes the runner, which claims every queued job of the tenant in turn.
    client.push([DocumentIn(external_id="wake.txt", text="Wake up.", acl=AclIn(public=True))])
    job = client.wait(str(job_id), timeout=120)
    assert job.state == "failed"
    assert [(e.external_id, e.code) for e in job.errors] == [("race.txt", "owned_by_other_connector")]
    assert live_server.versions("race.txt") == 1 and _owner(live_server, "race.txt") == "fs-a"

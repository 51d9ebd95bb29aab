"""An erasure (``ragline purge``) reaches every job item that carried the document, in any
state, and its staged upload; nothing queued before it brings the text back (a resume of a
cancelled job, a push that committed while the purge ran, the commit of an item queued
before it); an id that never committed can be erased; a push after the erasure is a new
document that works."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from catalog import jobs as jobs_repo
from catalog.jobs import NewItem
from cli.main import main
from core.errors import NotFoundError
from core.records import Acl, Failed, ItemRef
from core.settings import DEFAULT_EMBEDDING_MODEL, get_settings
from ingest.parse import EML
from jobs.commit import commit
from jobs.rebuild_job import rebuild
from services.caller import Caller
from services.tenants import erase_document
from tests import factories
from tests.integration.api.conftest import make_key, push_and_wait, swap_live, wait_job
from tests.integration.api.test_email_attachments import NOTES, _message, _push
from tests.integration.api.test_purge import _grep, _in_tables, cli_env  # noqa: F401  (a fixture)

pytestmark = pytest.mark.integration

CANCELLED = "quollcancelled4417"  # a cancelled push's payload: no document id yet
UPLOADED = "bilbyuploaded2286"  # a cancelled upload's staged file
FAILED = "dingofailed9053"  # a failed item's title and metadata
COMMITTED = "possumcommitted6120"  # the committed version's text
RACING = "wallabyracing3378"  # a push that committed while the purge ran
NEW = "echidnanew5512"  # pushed after the purge: a new document
PUBLIC = Acl((), True)
OPERATOR = Caller("operator:test", "cli")


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _item(external_id: str, text: str) -> NewItem:
    return NewItem(external_id, "text/plain", payload=text.encode(), acl=PUBLIC)


def _states(conn: psycopg.Connection, job_id: uuid.UUID) -> dict[str, str]:
    return {i.external_id: i.state for i in jobs_repo.items(conn, job_id=job_id)}


@pytest.mark.usefixtures("cli_env")  # the CLI's data dir is the app's (its uploads)
def test_purge_erases_every_item_and_a_resume_does_not_bring_it_back(
    full_client: TestClient, db_url: str, tmp_path: Path
) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:r")
    upload_dir = get_settings().upload_dir  # the app's too: the same data dir
    upload_dir.mkdir(parents=True, exist_ok=True)
    staged = upload_dir / uuid.uuid4().hex
    staged.write_text(f"Scanned note {UPLOADED} for the relay team.")
    with psycopg.connect(db_url, autocommit=True) as conn:
        # Pushes of "memo" that never committed: cancelled before they ran (one an upload).
        items = [
            _item("memo", f"Early draft {CANCELLED} of the relay memo."),
            _item("other", "The relay schedule for the other team."),
        ]
        cancelled = jobs_repo.create_job(conn, tenant_id="acme", kind="ingest", items=items)
        jobs_repo.request_cancel(conn, job_id=cancelled, tenant_id="acme")
        upload = NewItem("memo", "text/plain", payload_path=str(staged), acl=PUBLIC)
        uploaded = jobs_repo.create_job(conn, tenant_id="acme", kind="ingest", items=[upload])
        jobs_repo.request_cancel(conn, job_id=uploaded, tenant_id="acme")
        # ... and one that failed (its title and metadata stay on the item).
        bad = NewItem("memo", "application/x-unknown", f"Memo {FAILED}", {"note": FAILED}, PUBLIC, b"x")
        failed = jobs_repo.create_job(conn, tenant_id="acme", kind="ingest", items=[bad])
    full_client.app.state.runner.submit(failed)  # type: ignore[attr-defined]
    assert wait_job(full_client, ingest, str(failed))["state"] == "failed"
    push_and_wait(
        full_client,
        ingest,
        [{"external_id": "memo", "text": f"Final {COMMITTED} relay memo.", "acl": {"public": True}}],
    )

    assert main(["purge", "--tenant", "acme", "--external-id", "memo", "--no-rebuild", "--json"]) == 0
    assert not staged.exists()
    resumed = full_client.post(f"/v1/jobs/{cancelled}:resume", headers=_auth(ingest))
    assert resumed.status_code == 200, resumed.text
    assert wait_job(full_client, ingest, str(cancelled))["state"] == "succeeded"
    # the upload's job has nothing left to run: its item was erased
    assert full_client.post(f"/v1/jobs/{uploaded}:resume", headers=_auth(ingest)).status_code == 409

    markers = (CANCELLED, UPLOADED, FAILED, COMMITTED)
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert _states(conn, cancelled) == {"memo": "erased", "other": "succeeded"}
        assert _states(conn, uploaded) == {"memo": "erased"}
        assert _states(conn, failed) == {"memo": "failed"}  # its outcome stays, its content goes
        for m in markers:
            assert _in_tables(conn, m) == [], m
        # re-chunk and re-embed read parsed text (compressed: not seen by the scan above)
        texts = conn.execute(
            "SELECT count(*) FROM document_texts t JOIN documents d USING (doc_id)"
            " WHERE d.external_id = 'memo'"
        ).fetchone()
        assert texts == (0,)
        assert conn.execute("SELECT state FROM documents WHERE external_id = 'memo'").fetchone() == (
            "deleted",
        )
    config = factories.rebuild(index_root=tmp_path / "erasure-index", n_shards=1)
    assert swap_live(db_url, full_client, rebuild(db_url, config)) is not None
    assert _grep(tmp_path / "erasure-index", markers) == {}
    body = full_client.post(
        "/v1/retrieve", json={"query": "relay memo draft", "mode": "lexical"}, headers=_auth(reader)
    ).json()
    assert {r["document_external_id"] for r in body["results"]} == {"other"}

    # a push after the erasure is a new document
    push_and_wait(
        full_client, ingest, [{"external_id": "memo", "text": f"New {NEW} memo.", "acl": {"public": True}}]
    )
    with psycopg.connect(db_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT d.state, c.text FROM documents d JOIN chunks c"
            " ON c.doc_id = d.doc_id AND c.version = d.current_version WHERE d.external_id = 'memo'"
        ).fetchone()
    assert row is not None and row[0] == "active" and NEW in row[1]


def test_an_item_queued_before_the_erasure_is_never_written(
    full_client_shared: TestClient, db_url: str
) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    push_and_wait(
        full_client_shared,
        ingest,
        [{"external_id": "memo", "text": "A relay memo.", "acl": {"public": True}}],
    )
    with psycopg.connect(db_url) as racing:  # a push whose transaction is open while the purge runs
        racer = jobs_repo.create_job(racing, tenant_id="acme", kind="ingest", items=[_item("memo", RACING)])
        late = jobs_repo.create_job(racing, tenant_id="acme", kind="ingest", items=[_item("memo", RACING)])
        jobs_repo.request_cancel(racing, job_id=late, tenant_id="acme")  # run by hand below
        with psycopg.connect(db_url, autocommit=True) as conn:
            done = erase_document(
                conn, db_url, OPERATOR, None, tenant_id="acme", external_id="memo", alias="live"
            )
        assert done.deleted_now
        racing.commit()
    # the runner settles the item erased before it runs anything of it
    full_client_shared.app.state.runner.submit(racer)  # type: ignore[attr-defined]
    assert wait_job(full_client_shared, ingest, str(racer))["state"] == "succeeded"
    with psycopg.connect(db_url, autocommit=True) as conn:
        # and the write path refuses an item queued before the erasure whatever its outcome
        outcome = Failed(ItemRef(late, 0), "parse_error", f"could not parse {RACING}")
        assert commit(conn, outcome, model=DEFAULT_EMBEDDING_MODEL) == "erased"
        assert _states(conn, racer) == {"memo": "erased"} and _states(conn, late) == {"memo": "erased"}
        assert conn.execute("SELECT state FROM documents WHERE external_id = 'memo'").fetchone() == (
            "deleted",
        )
        assert _in_tables(conn, RACING) == []


def test_an_id_that_never_committed_can_be_erased(full_client_shared: TestClient, db_url: str) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    with psycopg.connect(db_url, autocommit=True) as conn:
        job = jobs_repo.create_job(conn, tenant_id="acme", kind="ingest", items=[_item("ghost", CANCELLED)])
        jobs_repo.request_cancel(conn, job_id=job, tenant_id="acme")
        done = erase_document(
            conn, db_url, OPERATOR, None, tenant_id="acme", external_id="ghost", alias="live"
        )
        assert not done.deleted_now and done.counts.job_payloads == 1
        assert _in_tables(conn, CANCELLED) == []
        assert _states(conn, job) == {"ghost": "erased"}
        assert conn.execute("SELECT external_id FROM erasures").fetchall() == [("ghost",)]
        assert conn.execute(
            "SELECT details->>'deleted_now' FROM audit_log"
            " WHERE action = 'document.purge' AND target = 'ghost'"
        ).fetchone() == ("false",)
        with pytest.raises(NotFoundError):  # nothing of this id was ever pushed
            erase_document(
                conn, db_url, OPERATOR, None, tenant_id="acme", external_id="never-was", alias="live"
            )
    assert full_client_shared.post(f"/v1/jobs/{job}:resume", headers=_auth(ingest)).status_code == 409
    push_and_wait(
        full_client_shared,
        ingest,
        [{"external_id": "ghost", "text": f"New {NEW} note.", "acl": {"public": True}}],
    )
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT state FROM documents WHERE external_id = 'ghost'").fetchone() == (
            "active",
        )


def test_an_attachment_erased_alone_stays_erased_when_its_message_is_resumed(
    full_client_shared: TestClient, db_url: str
) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    message = _message()
    assert _push(full_client_shared, ingest, "m.eml", message, {"public": True})["state"] == "succeeded"
    with psycopg.connect(db_url, autocommit=True) as conn:
        # an edit of the message queued before the erasure, cancelled (its attachments re-parsed)
        edited = message.replace(b"winter season", b"spring season")
        item = NewItem("m.eml", EML, payload=edited, acl=PUBLIC)
        job = jobs_repo.create_job(conn, tenant_id="acme", kind="ingest", items=[item])
        jobs_repo.request_cancel(conn, job_id=job, tenant_id="acme")
        erase_document(
            conn, db_url, OPERATOR, None, tenant_id="acme", external_id="m.eml#attachment=2", alias="live"
        )
    assert full_client_shared.post(f"/v1/jobs/{job}:resume", headers=_auth(ingest)).status_code == 200
    assert wait_job(full_client_shared, ingest, str(job))["state"] == "succeeded"
    with psycopg.connect(db_url, autocommit=True) as conn:
        rows = conn.execute("SELECT external_id, state FROM documents WHERE external_id LIKE 'm.eml%'")
        states: dict[str, str] = dict(rows.fetchall())
        versions = conn.execute(
            "SELECT current_version FROM documents WHERE external_id = 'm.eml'"
        ).fetchone()
        assert _in_tables(conn, NOTES) == []
    assert versions == (2,)  # the edit was written
    assert states["m.eml#attachment=2"] == "deleted" and states["m.eml#attachment=1"] == "active"

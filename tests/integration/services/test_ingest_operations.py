"""The ingest and job operations of ``services``: one function per operation, whichever path
calls it, with its audit entry in its transaction and the runner told only after the commit.

The API runs as the foundation app (no models), its runner replaced through
``app.dependency_overrides``; the CLI runs in this process on the same catalog."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.deps import get_runner
from catalog import audit
from catalog import jobs as jobs_repo
from catalog.audit import AuditRow
from cli.main import main
from core.errors import ConflictError, NotFoundError
from core.records import Acl
from core.settings import Settings, get_settings
from services import connectors, ingest, jobs
from services.caller import Caller
from services.ingest import NewItem
from tests.integration.api.conftest import make_key

pytestmark = pytest.mark.integration

CLI = Caller("operator:tester", "cli")
API = Caller("service:acme-ingest", "api")


class CommittedCheck:
    """A runner that, when told of a job, reads it back on a connection of its own: what it
    finds there is what a real runner in another process would find."""

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url
        self.seen: list[tuple[uuid.UUID, str | None, list[str]]] = []

    def submit(self, job_id: uuid.UUID) -> None:
        with psycopg.connect(self.db_url) as conn:
            job = jobs_repo.get_job(conn, job_id=job_id)
            actions = [r.action for r in audit.entries(conn) if r.target == str(job_id)]
        self.seen.append((job_id, job.state if job else None, actions))


@pytest.fixture
def app_client(db_url: str, tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(data_dir=tmp_path, database_url=db_url), hooks=[])) as client:
        yield client


@pytest.fixture
def cli_env(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("RAGLINE_DATABASE_URL", db_url)
    monkeypatch.setenv("RAGLINE_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    yield db_url
    get_settings.cache_clear()


def _item(external_id: str) -> NewItem:
    return NewItem(external_id, "text/plain", acl=Acl((), True), payload=b"A memo.", byte_size=7)


def _queued(db_url: str, tenant: str = "acme") -> uuid.UUID:
    with psycopg.connect(db_url) as conn:
        return ingest.queue_ingest(conn, tenant_id=tenant, caller=CLI, items=[_item("late")]).job_id


def _audit(db_url: str, action: str) -> list[AuditRow]:
    with psycopg.connect(db_url) as conn:
        return audit.entries(conn, action=action)


def _shape(row: AuditRow) -> tuple[str, frozenset[str], str | None]:
    return row.action, frozenset(row.details), row.tenant_id


def test_api_push_and_cli_ingest_write_one_audit_shape(
    app_client: TestClient, db_url: str, tmp_path: Path
) -> None:
    token = make_key(db_url, "acme", ["ingest"])
    doc = {
        "external_id": "a",
        "content_base64": base64.b64encode(b"Alpha.").decode(),
        "mime_type": "text/plain",
        "acl": {"public": True},
    }
    r = app_client.post(
        "/v1/documents", json={"documents": [doc]}, headers={"Authorization": f"Bearer {token}"}
    )
    assert r.status_code == 202, r.text
    with psycopg.connect(db_url) as conn:  # what `ragline ingest` does once it has its items
        cli_job = ingest.ingest_path(conn, caller=CLI, tenant_id="acme", items=[_item("b")], paths=[tmp_path])
        params = jobs_repo.get_job(conn, job_id=cli_job).params  # type: ignore[union-attr]
    pushes = {r.details["via"]: r for r in _audit(db_url, "ingest.push")}
    assert set(pushes) == {"api", "cli"}
    assert _shape(pushes["api"]) == _shape(pushes["cli"])
    assert pushes["api"].target == r.json()["job_id"] and pushes["cli"].target == str(cli_job)
    assert pushes["cli"].actor == "operator:tester" and pushes["api"].actor.startswith("service:")
    assert params["paths"] == [str(tmp_path)] and params["pushed_by"] == "operator:tester"


def test_push_tells_the_runner_only_after_its_commit(app_client: TestClient, db_url: str) -> None:
    runner = CommittedCheck(db_url)
    app_client.app.dependency_overrides[get_runner] = lambda: runner  # type: ignore[attr-defined]
    token = make_key(db_url, "acme", ["ingest"])
    r = app_client.post(
        "/v1/documents:upload",
        files={"file": ("a.txt", b"Alpha text.")},
        data={"external_id": "a", "acl": '{"public": true}'},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 202, r.text
    assert runner.seen == [(uuid.UUID(r.json()["job_id"]), "queued", ["ingest.push"])]


def test_cancel_through_api_and_cli_is_one_operation(
    app_client: TestClient, cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    token = make_key(cli_env, "acme", ["ingest"])
    by_api, by_cli = _queued(cli_env), _queued(cli_env)
    r = app_client.post(f"/v1/jobs/{by_api}:cancel", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    assert main(["jobs", "cancel", str(by_cli)]) == 0
    assert f"cancel requested: job {by_cli} is cancelled" in capsys.readouterr().out
    rows = {r.details["via"]: r for r in _audit(cli_env, "job.cancel")}
    assert {k: (r.target, r.details["state"]) for k, r in rows.items()} == {
        "api": (str(by_api), "cancelled"),
        "cli": (str(by_cli), "cancelled"),
    }
    assert _shape(rows["api"]) == _shape(rows["cli"])
    # an unknown job: the API's 404 and the CLI's exit 1 say the same, and nothing is audited
    missing = uuid.uuid4()
    r = app_client.post(f"/v1/jobs/{missing}:cancel", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 404 and r.json()["error"]["message"] == f"no job {missing}"
    assert main(["jobs", "cancel", str(missing)]) == 1
    assert f"ragline: no job {missing}" in capsys.readouterr().err
    # a job that has ended: the API answers it with its state, the CLI says so and exits 1
    r = app_client.post(f"/v1/jobs/{by_cli}:cancel", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    assert main(["jobs", "cancel", str(by_api)]) == 1
    assert f"ragline: job {by_api} has already ended: cancelled" in capsys.readouterr().err
    assert len(_audit(cli_env, "job.cancel")) == 3  # the API call above is audited, the CLI refusal not


def test_cancel_is_tenant_scoped_for_a_key_and_not_for_the_operator(db_url: str) -> None:
    job_id = _queued(db_url, tenant="other")
    with psycopg.connect(db_url) as conn:
        with pytest.raises(NotFoundError):
            jobs.cancel(conn, caller=API, job_id=job_id, tenant_id="acme")
        assert jobs.find_job(conn, job_id=job_id, tenant_id=None).state == "queued"  # type: ignore[union-attr]
        assert jobs.cancel(conn, caller=CLI, job_id=job_id, tenant_id=None).state == "cancelled"
    assert [r.tenant_id for r in _audit(db_url, "job.cancel")] == ["other"]


def test_resume_checks_in_order_then_submits_after_commit(app_client: TestClient, db_url: str) -> None:
    token = make_key(db_url, "acme", ["ingest"])
    headers = {"Authorization": f"Bearer {token}"}
    job_id = _queued(db_url)
    assert app_client.post(f"/v1/jobs/{uuid.uuid4()}:resume", headers=headers).status_code == 404
    assert app_client.post(f"/v1/jobs/{job_id}:resume", headers=headers).status_code == 503  # no runner
    runner = CommittedCheck(db_url)
    app_client.app.dependency_overrides[get_runner] = lambda: runner  # type: ignore[attr-defined]
    r = app_client.post(f"/v1/jobs/{job_id}:resume", headers=headers)
    assert (
        r.status_code == 409
        and r.json()["error"]["message"] == f"job {job_id} is queued and has no items left to run"
    )
    assert app_client.post(f"/v1/jobs/{job_id}:cancel", headers=headers).json()["resumable"] is True
    r = app_client.post(f"/v1/jobs/{job_id}:resume", headers=headers)
    assert r.status_code == 200 and r.json()["state"] == "queued"
    assert runner.seen == [(job_id, "queued", ["job.resume", "job.cancel", "ingest.push"])]


def test_resume_here_reopens_an_ended_job_and_audits_what_ran(db_url: str) -> None:
    job_id = _queued(db_url)
    handed: list[tuple[str, int]] = []

    def held_elsewhere(job: jobs.JobRow) -> str | None:
        handed.append((job.state, job.documents_total))
        return None  # a live worker holds it: nothing ran, nothing to audit

    with psycopg.connect(db_url) as conn:
        jobs.cancel(conn, caller=CLI, job_id=job_id, tenant_id=None)
        assert jobs.resume_here(conn, caller=CLI, job_id=job_id, run=held_elsewhere) is None
        assert handed == [("queued", 1)]  # reopened before it was handed over
        assert not audit.entries(conn, action="job.resume")
        with pytest.raises(NotFoundError):
            jobs.resume_here(conn, caller=CLI, job_id=uuid.uuid4(), run=held_elsewhere)
        conn.execute("UPDATE jobs SET state = 'succeeded' WHERE job_id = %s", (job_id,))
        conn.commit()
        with pytest.raises(ConflictError, match="is succeeded and has no items left to run"):
            jobs.resume_here(conn, caller=CLI, job_id=job_id, run=held_elsewhere)


def test_delete_and_acl_of_a_missing_document_leave_no_audit_entry(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        with pytest.raises(NotFoundError):
            ingest.delete_document(conn, caller=API, tenant_id="acme", external_id="nope")
        with pytest.raises(NotFoundError):
            ingest.set_acl(
                conn, caller=API, tenant_id="acme", external_id="nope", acl=Acl(("user:a",), False)
            )
        assert not audit.entries(conn, action="document.delete")
        assert not audit.entries(conn, action="document.acl")


def test_connector_state_changes_are_audited_with_their_size(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        change = connectors.StateChange(cursor="c1", set_documents={"a": "sha256:1", "b": "sha256:2"})
        saved = connectors.save_state(conn, caller=API, tenant_id="acme", connector="fs-x", change=change)
        assert (saved.cursor, saved.documents) == ("c1", 2)
        assert connectors.get_state(conn, tenant_id="acme", connector="fs-x").documents == {
            "a": "sha256:1",
            "b": "sha256:2",
        }
        assert connectors.reset_state(conn, caller=API, tenant_id="acme", connector="fs-x") is True
        assert connectors.reset_state(conn, caller=API, tenant_id="acme", connector="fs-x") is False
        state = audit.entries(conn, action="connector.state")
        resets = audit.entries(conn, action="connector.reset")
    assert [r.details for r in state] == [
        {
            "cursor": True,
            "set_documents": 2,
            "remove_documents": 0,
            "set_groups": 0,
            "remove_groups": 0,
            "via": "api",
        }
    ]
    assert [r.details["had_state"] for r in resets] == [False, True]  # newest first

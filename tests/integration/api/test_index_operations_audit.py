"""One index operation, one audit shape, whichever path asked for it: ``ragline index``, the
console's ``/v1/admin/index...`` routes and the maintenance tick all go through
``services.index``, so their ``index.rebuild``/``index.swap``/``index.gc`` entries differ
only in ``actor`` and ``via`` (and the values of what was done)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from catalog import audit
from catalog.audit import AuditRow
from cli.main import main
from cli.output import operator
from core.settings import get_settings
from services.maintenance import tick
from tests import factories
from tests.integration.api.conftest import full_settings, make_key, serving_client, wait_job
from wiring import rebuild_config

pytestmark = pytest.mark.integration


@pytest.fixture
def client(db_url: str, tmp_path: Path, embedder) -> Iterator[TestClient]:
    """The whole API with no GC grace, so the console's GC has something to delete."""
    yield from serving_client(full_settings(db_url, tmp_path, index={"gc_grace_seconds": 0}), embedder)


@pytest.fixture
def cli_env(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI on the server's catalog and data dir (its index versions are the server's)."""
    monkeypatch.setenv("RAGLINE_DATABASE_URL", db_url)
    monkeypatch.setenv("RAGLINE_DATA_DIR", str(tmp_path))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def _push(client: TestClient, token: str, ids: range) -> None:
    docs = [
        {
            "external_id": f"d{i}",
            "text": f"index operations document {i} on topic {i % 3}",
            "acl": {"public": True},
        }
        for i in ids
    ]
    job = client.post("/v1/documents", json={"documents": docs}, headers={"Authorization": f"Bearer {token}"})
    assert wait_job(client, token, job.json()["job_id"])["state"] == "succeeded"


def _built(out: str) -> str:
    return re.findall(r"^built (\S+)$", out, flags=re.M)[-1]


def _entries(db_url: str, action: str) -> list[AuditRow]:
    with psycopg.connect(db_url) as conn:
        return list(audit.entries(conn, action=action, limit=1000))


def test_cli_console_and_scheduler_write_one_shape_per_index_action(
    client: TestClient, cli_env: None, db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    op = {"Authorization": f"Bearer {make_key(db_url, 'acme', ['operator'], principal='user:op')}"}
    _push(client, ingest, range(4))

    assert main(["index", "rebuild", "--swap", "live"]) == 0
    v1 = _built(capsys.readouterr().out)
    assert main(["index", "rebuild"]) == 0
    v2 = _built(capsys.readouterr().out)
    assert main(["index", "swap", "--alias", "live", "--version", v2]) == 0
    assert capsys.readouterr().out.strip() == f"live: {v1} -> {v2}"

    swapped = client.post("/v1/admin/index/aliases/live:swap", json={"version_id": v1}, headers=op)
    assert swapped.status_code == 200, swapped.text
    # the route's node follows the swap at once
    assert swapped.json() == {"alias": "live", "previous": v2, "current": v1, "serving": v1}
    rolled = client.post("/v1/admin/index/aliases/live:rollback", headers=op).json()
    assert rolled == {"alias": "live", "previous": v1, "current": v2, "serving": v2}

    assert main(["index", "rebuild"]) == 0  # unaliased: the console's GC deletes it
    v3 = _built(capsys.readouterr().out)
    gc = client.post("/v1/admin/index:gc", headers=op).json()
    assert gc["deleted"] == [v3] and gc["grace_seconds"] == 0
    assert main(["index", "rebuild"]) == 0  # and this one the CLI's
    v4 = _built(capsys.readouterr().out)
    assert main(["index", "gc", "--grace-seconds", "0"]) == 0
    assert f"deleted {v4}" in capsys.readouterr().out

    _push(client, ingest, range(10, 12))  # a delta past the policy's threshold
    policy = factories.policy(delta_chunks=1, tombstone_ratio=0.99, gc_grace_seconds=0)
    ticked = tick(db_url, rebuild_config(get_settings()), policy)
    assert ticked.rebuilt and v1 in ticked.collected  # v2 is now the rollback target, v1 garbage

    expected_vias = {
        "index.rebuild": {"cli", "scheduler"},
        "index.swap": {"cli", "console", "scheduler"},
        "index.gc": {"cli", "console", "scheduler"},
    }
    actors = {"cli": operator(), "console": "user:op", "scheduler": "scheduler"}
    for action, vias in expected_vias.items():
        entries = _entries(db_url, action)
        assert {r.details["via"] for r in entries} == vias, action
        assert len({frozenset(r.details) for r in entries}) == 1, (action, [r.details for r in entries])
        assert all(r.actor == actors[r.details["via"]] for r in entries), action
    swaps = _entries(db_url, "index.swap")
    rollback = [r for r in swaps if r.details["reasons"] == ["rollback"]]
    assert [(r.target, r.details["from"], r.details["to"], r.details["via"]) for r in rollback] == [
        ("live", v1, v2, "console")
    ]
    gcs = {r.details["via"]: r.details["deleted"] for r in _entries(db_url, "index.gc")}
    assert gcs["console"] == [v3] and gcs["cli"] == [v4] and v1 in gcs["scheduler"]

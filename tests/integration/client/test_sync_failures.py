"""``ragline connect fs`` over a file that fails for good (an encrypted workbook): the run
that finds it fails it (exit 3); later runs over the unchanged file do not send it again and
say it is still failing (exit 0); a changed file, or ``--retry-failed``, is sent again. The
summary carries the job's warnings (a Latin-1 text file decoded). In-process CLI runs; one
server for the module, a tenant per test (``live_tenant``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cli.main import main
from ragline_client import Client
from tests import hostile_office
from tests.integration.client.conftest import LiveServer
from tests.unit.ingest.office_factory import xlsx_bytes

pytestmark = pytest.mark.integration


def _connect(
    server: LiveServer, key: str, root: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, Any, str]:
    (root.parent / "map.json").write_text(json.dumps({"*": {"public": True}}))
    argv = ["connect", "fs", str(root), "--acl-map", str(root.parent / "map.json"), "--tenant", server.tenant]
    code = main([*argv, "--url", server.url, "--key", key, *extra])
    out, err = capsys.readouterr()
    return code, (json.loads(out.strip().splitlines()[-1]) if "--json" in extra else out), err


def _jobs(server: LiveServer) -> int:
    with psycopg.connect(server.db_url) as conn:
        row = conn.execute("SELECT count(*) FROM jobs WHERE tenant_id = %s", (server.tenant,)).fetchone()
    return int(row[0]) if row else 0


def test_a_file_that_fails_for_good_is_not_sent_again_until_it_changes(
    live_tenant: LiveServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "share"
    root.mkdir()
    (root / "guide.md").write_text("# Guide\n\nThe badge office opens at nine.\n")
    (root / "book.xlsx").write_bytes(hostile_office.encrypted(xlsx_bytes()))
    key = live_tenant.key("ingest")

    code, first, err = _connect(live_tenant, key, root, capsys, "--json")
    assert code == 3, err[-2000:]
    assert "failed book.xlsx: encrypted_document" in err
    said = "not sent again until it changes" in err

    jobs = _jobs(live_tenant)
    code, second, err = _connect(live_tenant, key, root, capsys, "--json")
    assert code == 0, err[-2000:]
    assert _jobs(live_tenant) == jobs  # not sent: no job
    assert said and (first["pushed"], first["failed"], first["still_failing"]) == (1, 1, 0)
    assert (second["pushed"], second["unchanged"], second["failed"], second["still_failing"]) == (0, 1, 0, 1)
    assert "1 item still failing since 20" in err and "book.xlsx: encrypted_document" in err
    assert "failed book.xlsx" not in err
    code, text, err = _connect(live_tenant, key, root, capsys)
    assert code == 0 and "still_failing 1" in text and "still failing since" in err

    # Asked to: sent again, failed again, and said so again; the date it first failed stays.
    since = Client(live_tenant.url, key).connector_state(_name(root)).documents["book.xlsx"]
    code, forced, err = _connect(live_tenant, key, root, capsys, "--json", "--retry-failed")
    assert code == 3 and (forced["failed"], forced["still_failing"]) == (1, 0)
    assert _jobs(live_tenant) == jobs + 1
    assert Client(live_tenant.url, key).connector_state(_name(root)).documents["book.xlsx"] == since

    # Fixed (saved without the password): a new fingerprint, sent and ingested.
    (root / "book.xlsx").write_bytes(xlsx_bytes())
    code, fixed, err = _connect(live_tenant, key, root, capsys, "--json")
    assert code == 0, err[-2000:]
    assert (fixed["pushed"], fixed["failed"], fixed["still_failing"]) == (1, 0, 0)
    assert live_tenant.versions("book.xlsx") == 1


def _name(root: Path) -> str:
    from cli.connect import default_name

    return default_name(root)


def test_the_summary_shows_the_jobs_warnings(
    live_tenant: LiveServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "share"
    root.mkdir()
    (root / "menu.txt").write_bytes("Crème brûlée, café au lait et gâteau à la mode.\n".encode("latin-1"))
    (root / "plain.md").write_text("# Plain\n\nNothing to warn about here.\n")
    key = live_tenant.key("ingest")
    code, summary, err = _connect(live_tenant, key, root, capsys, "--json")
    assert code == 0, err[-2000:]
    assert "  warning menu.txt: decoded_as: " in err
    assert summary["warnings"]["documents"] == 1
    assert list(summary["warnings"]["shown"]) == ["menu.txt"]
    assert summary["warnings"]["shown"]["menu.txt"].startswith("decoded_as: ")

    (root / "menu.txt").write_bytes("Tarte à l'oignon, soupe à l'oignon gratinée.\n".encode("latin-1"))
    code, text, err = _connect(live_tenant, key, root, capsys)
    assert code == 0 and "warnings 1" in text and "  warning menu.txt: decoded_as: " in err

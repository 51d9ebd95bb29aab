"""``ragline connect fs`` over a file that fails for good (an encrypted workbook): the run
that finds it fails it (exit 3); later runs over the unchanged file do not send it again and
say it is still failing (exit 0); a changed file, or ``--retry-failed``, is sent again. A
failure of the moment is tried every run; a listing that vouches for unlisted items (IMAP's
unchanged folders) keeps a remembered one still failing. The summary carries the job's
warnings (a Latin-1 text file decoded). In-process CLI runs; one server for the module, a
tenant per test (``live_tenant``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cli.connect import AclMap, FsConnector
from cli.main import main
from ragline_client import AclIn, Client, Connector, DocumentIn, Item, Listing, Syncer
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


def test_a_failure_of_the_moment_is_tried_every_run(live_tenant: LiveServer, tmp_path: Path) -> None:
    root = tmp_path / "share"
    root.mkdir()
    (root / "empty.txt").write_text("  \n")  # the job fails it for good: empty_document
    (root / "unmapped.md").write_text("# Unmapped\n\nNo rule covers this file.\n")  # load raises
    (tmp_path / "map.json").write_text(json.dumps({"*.txt": {"public": True}}))
    client = Client(live_tenant.url, live_tenant.key("ingest"))
    connector = FsConnector(root, name="fs-moment", acl_map=AclMap.load(tmp_path / "map.json"))
    first = Syncer(client, connector).run()
    assert sorted(first.errors) == ["empty.txt", "unmapped.md"]
    again = Syncer(client, connector).run()
    assert list(again.errors) == ["unmapped.md"] and again.failed == 1  # tried again, failed again
    assert list(again.still_failing) == ["empty.txt"]


class _Folder(Connector):
    """A source whose cursor vouches for what it does not list, as IMAP's unchanged folders do."""

    name = "vouching"
    texts = {"f/good": "The folder's good message about the quarterly review.", "f/empty": "   "}

    def list_items(self, cursor: str | None) -> Listing:
        if cursor == "mark":
            return Listing(items=[], unchanged=["f/"], cursor_vouches=True)
        items = [Item(ext, "v1", AclIn(public=True)) for ext in self.texts]
        return Listing(items=items, cursor="mark", cursor_vouches=True)

    def load(self, item: Item) -> DocumentIn:
        return DocumentIn(external_id=item.external_id, text=self.texts[item.external_id], acl=item.acl)


def test_a_listing_that_vouches_keeps_a_remembered_failure(live_tenant: LiveServer) -> None:
    client = Client(live_tenant.url, live_tenant.key("ingest"))
    assert Syncer(client, _Folder()).run().failed == 1  # failed: the marks are not saved
    second = Syncer(client, _Folder()).run()  # listed again: remembered, so the marks are saved
    assert (second.failed, list(second.still_failing), second.unchanged) == (0, ["f/empty"], 1)
    vouched = Syncer(client, _Folder()).run()  # not listed: vouched for, still failing
    assert (vouched.failed, list(vouched.still_failing), vouched.unchanged) == (0, ["f/empty"], 1)
    forced = Syncer(client, _Folder(), retry_failed=True).run()  # listed from no cursor, sent
    assert (forced.failed, forced.still_failing, forced.unchanged) == (1, {}, 1)
    assert "empty_document" in forced.errors["f/empty"]

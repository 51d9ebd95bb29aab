"""``ragline connect fs`` takes no hidden files unless asked, honours ``--include`` and
``--exclude``, reports what it skipped and what changed ACL only (text and ``--json``),
counts progress once per document, and ``--id-prefix`` lets two folders with the same
relative paths share a tenant. One server for the module, a tenant per test (``live_tenant``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from cli.connect import AclMap, FsConnector
from ingest.files import FileFilter
from ragline_client import Client, Syncer
from ragline_client.models import ConnectorStateUpdate
from tests.integration.client.conftest import LiveServer

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
SECRET = "DATABASE_PASSWORD=correct-horse-battery-staple"


def _tree(root: Path) -> Path:
    files = {
        "guide.md": "# Guide\n\nThe onboarding guide explains the badge office hours.\n",
        "drafts/plan.txt": "Draft plan: move the cafeteria to the third floor next spring.\n",
        ".env.txt": SECRET + "\n",
        ".hidden.md": "# Hidden\n\nPrivate notes about the reorganisation.\n",
        ".git/description.txt": "Unnamed repository; edit this file to name it.\n",
        "team/.cache/page.html": "<p>Cached copy of the intranet page.</p>",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _public(tmp_path: Path) -> AclMap:
    (tmp_path / "map.json").write_text(json.dumps({"*": {"public": True}}))
    return AclMap.load(tmp_path / "map.json")


def _ids(client: Client, query: str) -> list[str]:
    return [r.document_external_id for r in client.retrieve(query).results]


def test_hidden_files_are_never_pushed_by_default(live_tenant: LiveServer, tmp_path: Path) -> None:
    root = _tree(tmp_path / "share")
    client = Client(live_tenant.url, live_tenant.key("ingest"))
    reader = Client(live_tenant.url, live_tenant.key("query", principal="user:eve"))
    connector = FsConnector(root, name="fs-hidden", acl_map=_public(tmp_path))
    report = Syncer(client, connector).run()
    assert report.pushed == 2
    assert sorted(client.connector_state("fs-hidden").documents) == ["drafts/plan.txt", "guide.md"]
    assert connector.walked.skipped() == {"hidden": 4, "excluded": 0, "unsupported": 0, "symlinks": 0}
    assert all(SECRET not in r.text for r in reader.retrieve("DATABASE_PASSWORD").results)
    assert ".env.txt" not in _ids(reader, "database password")

    # An include glob that names a dot-folder takes it; an exclude glob wins.
    connector.selection = FileFilter(include=("*.md", ".git/**"), exclude=("drafts/",))
    again = Syncer(client, connector).run()
    assert (again.pushed, again.deleted) == (1, 1)  # .git/description.txt in, drafts/plan.txt out
    assert sorted(client.connector_state("fs-hidden").documents) == [".git/description.txt", "guide.md"]
    assert connector.walked.skipped() == {"hidden": 3, "excluded": 1, "unsupported": 0, "symlinks": 0}


def _cli(server: LiveServer, key: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAGLINE_API_URL": server.url, "RAGLINE_API_KEY": key}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "connect", "fs", *argv, "--tenant", server.tenant],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_cli_reports_skipped_files_and_acl_only_changes(live_tenant: LiveServer, tmp_path: Path) -> None:
    root = _tree(tmp_path / "share")
    (root / "tool.exe").write_bytes(b"MZ\x90\x00")  # a type ragline does not parse
    key = live_tenant.key("ingest")
    rules = tmp_path / "map.json"
    rules.write_text(json.dumps({"*": {"public": True}}))
    base = [str(root), "--acl-map", str(rules), "--exclude", "drafts/"]
    first = _cli(live_tenant, key, *base, "--json")
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads(first.stdout.strip().splitlines()[-1]) == {
        "pushed": 1,
        "unchanged": 0,
        "deleted": 0,
        "acl_updated": 0,
        "groups_synced": 0,
        "failed": 0,
        "still_failing": 0,
        "skipped": {"hidden": 4, "excluded": 1, "unsupported": 1, "symlinks": 0},
        "warnings": {"documents": 0, "shown": {}},
    }
    assert "skipped 4 hidden files and folders" in first.stderr
    assert ".env.txt" in first.stderr and ".git/" in first.stderr and "team/.cache/" in first.stderr

    # The ACL alone changes: reported as acl_updated, in JSON and in the text summary.
    rules.write_text(json.dumps({"*": {"principals": ["group:eng"]}}))
    acl_only = _cli(live_tenant, key, *base, "--json")
    assert acl_only.returncode == 0, acl_only.stderr[-2000:]
    summary = json.loads(acl_only.stdout.strip().splitlines()[-1])
    assert (summary["pushed"], summary["unchanged"], summary["acl_updated"]) == (0, 0, 1)
    rules.write_text(json.dumps({"*": {"public": True}}))
    text = _cli(live_tenant, key, *base)
    assert text.returncode == 0, text.stderr[-2000:]
    assert "acl_updated 1" in text.stdout
    assert "skipped 6 (hidden 4, excluded 1, unsupported 1, symlinks 0)" in text.stdout


def test_progress_counts_each_document_once(live_tenant: LiveServer, tmp_path: Path) -> None:
    """Found unchanged by the job, failed in the job, failed on load: still one tick each,
    so the count ends at the plan's total (it showed ``8/6 docs``)."""
    root = tmp_path / "share"
    root.mkdir()
    for i in range(4):
        (root / f"doc{i}.md").write_text(f"# Doc {i}\n\nBody text number {i} about topic {i}.\n")
    (root / "empty.txt").write_text("   \n")  # fails in the job: empty_document
    (root / "unmapped.txt").write_text("No rule in the map covers this file.\n")  # fails on load
    (tmp_path / "map.json").write_text(json.dumps({"*.md": {"public": True}, "empty.txt": {"public": True}}))
    rules = AclMap.load(tmp_path / "map.json")
    client = Client(live_tenant.url, live_tenant.key("ingest"))
    assert Syncer(client, FsConnector(root, name="fs-p", acl_map=rules)).run().pushed == 4
    # The state forgets two documents: the next run sends them again and the job finds them unchanged.
    client.save_connector_state("fs-p", ConnectorStateUpdate(remove_documents=["doc0.md", "doc1.md"]))
    # retry_failed: the empty file, remembered as failing for good, is sent (and fails) again.
    syncer = Syncer(client, FsConnector(root, name="fs-p", acl_map=rules), retry_failed=True)
    plan = syncer.plan()
    ticks: list[int] = []
    report = syncer.apply(plan, lambda docs, _chunks: ticks.append(docs))
    assert (report.pushed, report.failed) == (2, 2)
    assert plan.total == 4 and sum(ticks) == plan.total


def test_id_prefix_lets_two_folders_with_the_same_paths_share_a_tenant(
    live_tenant: LiveServer, tmp_path: Path
) -> None:
    key = live_tenant.key("ingest")
    reader = Client(live_tenant.url, live_tenant.key("query", principal="user:ann"))
    rules = tmp_path / "map.json"
    rules.write_text(json.dumps({"*": {"public": True}}))
    for team, text in (("a", "Team A ships the mobile app."), ("b", "Team B runs the data warehouse.")):
        (tmp_path / team).mkdir()
        (tmp_path / team / "readme.txt").write_text(text + "\n")
        run = _cli(live_tenant, key, str(tmp_path / team), "--acl-map", str(rules), "--id-prefix", f"{team}/")
        assert run.returncode == 0, run.stderr[-2000:]
    assert _ids(reader, "mobile app")[0] == "a/readme.txt"
    assert _ids(reader, "data warehouse")[0] == "b/readme.txt"
    (tmp_path / "b" / "readme.txt").unlink()
    run = _cli(live_tenant, key, str(tmp_path / "b"), "--acl-map", str(rules), "--id-prefix", "b/", "--json")
    assert json.loads(run.stdout.strip().splitlines()[-1])["deleted"] == 1
    assert _ids(reader, "mobile app")[0] == "a/readme.txt"


def test_a_document_pushed_without_readers_is_warned_about(live_tenant: LiveServer, tmp_path: Path) -> None:
    root = tmp_path / "share"
    root.mkdir()
    (root / "open.md").write_text("# Open\n\nFor everyone.\n")
    (root / "locked.md").write_text("# Locked\n\nFor nobody, by mistake.\n")
    (tmp_path / "map.json").write_text(json.dumps({"locked.md": {"principals": []}, "*": {"public": True}}))
    client = Client(live_tenant.url, live_tenant.key("ingest"))
    report = Syncer(client, FsConnector(root, name="fs-w", acl_map=AclMap.load(tmp_path / "map.json"))).run()
    assert report.pushed == 2
    assert list(report.warnings) == ["locked.md"] and "no_readers" in report.warnings["locked.md"]
    direct = client.push([{"external_id": "x", "text": "No readers either."}])
    assert [(w.index, w.code) for w in direct.warnings] == [(0, "no_readers")]


def _linked_share(tmp_path: Path, marker: str) -> Path:
    """A share whose links lead out (a world-readable secret, a key folder, a dangling one)
    and in (to a file the share holds anyway)."""
    outside = tmp_path / "outside"
    (outside / "keys").mkdir(parents=True)
    (outside / "pgpass.txt").write_text(f"localhost:5432:*:ragline:{marker}\n")
    (outside / "pgpass.txt").chmod(0o644)  # world-readable: --posix-acl would have made it public
    (outside / "keys" / "id.md").write_text(f"# Key\n\n{marker}\n")
    root = tmp_path / "share"
    root.mkdir()
    (root / "guide.md").write_text("# Guide\n\nThe onboarding guide explains the badge office hours.\n")
    (root / "guide.md").chmod(0o644)
    (root / "passwords.txt").symlink_to(outside / "pgpass.txt")
    (root / "keys").symlink_to(outside / "keys", target_is_directory=True)
    (root / "copy.md").symlink_to(root / "guide.md")
    (root / "gone.md").symlink_to(tmp_path / "nowhere.md")
    return root


def test_no_link_leads_the_connector_outside_its_folder(live_tenant: LiveServer, tmp_path: Path) -> None:
    marker = "PGPASSFILE-MARKER-9d41"
    root = _linked_share(tmp_path, marker)
    client = Client(live_tenant.url, live_tenant.key("ingest"))
    reader = Client(live_tenant.url, live_tenant.key("query", principal="user:eve"))
    connector = FsConnector(root, name="fs-links", acl_map=None)  # --posix-acl
    report = Syncer(client, connector).run()
    assert (report.pushed, report.failed) == (1, 0)
    assert sorted(client.connector_state("fs-links").documents) == ["guide.md"]
    assert sorted(p.name for p in connector.walked.links) == ["copy.md", "gone.md", "keys", "passwords.txt"]
    assert all(marker not in r.text for r in reader.retrieve("ragline password localhost key").results)

    # A file swapped for a link between the listing and the read fails alone, unread.
    (root / "notes.md").write_text("# Notes\n\nMeeting notes about the badge office.\n")
    syncer = Syncer(client, connector)
    plan = syncer.plan()
    (root / "notes.md").unlink()
    (root / "notes.md").symlink_to(tmp_path / "outside" / "pgpass.txt")
    swapped = syncer.apply(plan, lambda _docs, _chunks: None)
    assert swapped.failed == 1 and "symbolic link" in swapped.errors["notes.md"]
    with psycopg.connect(live_tenant.db_url) as conn:
        leaked = conn.execute("SELECT count(*) FROM chunks WHERE strpos(text, %s) > 0", (marker,)).fetchone()
    assert leaked == (0,)


def test_cli_reports_the_links_it_skipped(live_tenant: LiveServer, tmp_path: Path) -> None:
    root = _linked_share(tmp_path, "PGPASSFILE-MARKER-0b77")
    run = _cli(live_tenant, live_tenant.key("ingest"), str(root), "--posix-acl", "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["pushed"] == 1 and summary["skipped"]["symlinks"] == 4
    assert "skipped 4 symbolic links (never followed" in run.stderr
    assert all(name in run.stderr for name in ("copy.md", "gone.md", "keys/", "passwords.txt"))

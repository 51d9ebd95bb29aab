"""The filesystem connector on the connector kit, against a real server: first sync pushes
everything, a second sends nothing, a change makes one new version, a deleted file is gone
from retrieval, an ACL change alone is one PUT, and a sync killed midway resumes without
duplicates. The CLI runs as ``ragline connect fs`` in a subprocess, once with ``--watch``.
One server for the module, a tenant per test (``live_tenant``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from cli.connect import AclMap, FsConnector, posix_rule
from ragline_client import Client, Connector, DocumentIn, Item, Listing, Syncer
from ragline_client.models import ConnectorStateSaved, ConnectorStateUpdate
from tests.integration.client.conftest import CountingTransport, LiveServer, dies_after

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
FILES = {
    "failover.md": "# Failover\n\nPromote the standby with pg_ctl promote, then repoint the pooler.\n",
    "lunch.txt": "Monday: soup. Tuesday: pasta with tomato sauce. Wednesday: fish and chips.\n",
    "guide/vpn.html": "<html><body><h1>VPN</h1><p>Install the wireguard profile.</p></body></html>",
    "hr/pay.txt": "Confidential salary bands for the engineering ladder.\n",
}
ACL_MAP = {"hr/*": {"principals": ["group:hr"]}, "*": {"public": True}}
SKIPPED = {"hidden": 0, "excluded": 0, "unsupported": 1, "symlinks": 0}  # notes.bin
NO_WARNINGS = {"documents": 0, "shown": {}}


def _counts(*, pushed: int = 0, unchanged: int = 0, deleted: int = 0) -> dict[str, int]:
    return {
        "pushed": pushed,
        "unchanged": unchanged,
        "deleted": deleted,
        "acl_updated": 0,
        "groups_synced": 0,
        "failed": 0,
        "still_failing": 0,
    }


def _tree(root: Path) -> Path:
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "notes.bin").write_bytes(b"\x00\x01")  # not a supported type: never sent
    return root


def _map(tmp_path: Path, rules: dict = ACL_MAP) -> AclMap:
    path = tmp_path / "acl-map.json"
    path.write_text(json.dumps(rules))
    return AclMap.load(path)


def _ids(client: Client, query: str) -> list[str]:
    return [r.document_external_id for r in client.retrieve(query).results]


def test_incremental_sync_push_unchanged_change_delete_acl(live_tenant: LiveServer, tmp_path: Path) -> None:
    root = _tree(tmp_path / "share")
    transport = CountingTransport()
    client = Client(live_tenant.url, live_tenant.key("ingest"), transport=transport)
    reader = Client(live_tenant.url, live_tenant.key("query", principal="user:ann"))
    connector = FsConnector(root, name="fs-share", acl_map=_map(tmp_path))

    first = Syncer(client, connector).run()
    assert first.summary() == _counts(pushed=4)
    assert "failover.md" in _ids(reader, "promote the standby")
    assert "hr/pay.txt" not in _ids(reader, "salary bands engineering ladder")

    transport.sent.clear()
    second = Syncer(client, connector).run()
    assert second.summary() == _counts(unchanged=4)
    assert transport.writes() == []  # nothing sent: no push, upload, delete, ACL or state write

    (root / "failover.md").write_text(
        FILES["failover.md"] + "\nThen check replication lag on the new primary.\n"
    )
    changed = Syncer(client, connector).run()
    assert changed.summary() == _counts(pushed=1, unchanged=3)
    assert live_tenant.versions("failover.md") == 2 and live_tenant.versions("lunch.txt") == 1

    (root / "lunch.txt").unlink()
    assert _ids(reader, "soup pasta fish")[0] == "lunch.txt"
    gone = Syncer(client, connector).run()
    assert gone.summary() == _counts(unchanged=3, deleted=1)
    assert "lunch.txt" not in _ids(reader, "soup pasta fish")

    # An ACL change alone: one PUT, no re-ingest.
    connector.acl_map = _map(
        tmp_path, {"hr/*": {"principals": ["group:hr", "user:ann"]}, "*": {"public": True}}
    )
    transport.sent.clear()
    acl = Syncer(client, connector).run()
    assert (acl.acl_updated, acl.pushed) == (1, 0)
    assert [s for s in transport.writes() if "/documents" in s] == ["PUT /v1/documents/hr/pay.txt/acl"]
    assert "hr/pay.txt" in _ids(reader, "salary bands engineering ladder")


class _DiesSavingState(Client):
    """Fault injection: the process dies after the server accepted a batch, before the state
    recording it was saved (the worst moment)."""

    def save_connector_state(self, name: str, update: ConnectorStateUpdate) -> ConnectorStateSaved:
        raise KeyboardInterrupt


def test_killed_sync_resumes_without_duplicates(live_tenant: LiveServer, tmp_path: Path) -> None:
    root = _tree(tmp_path / "share")
    key = live_tenant.key("ingest")
    acl_map = _map(tmp_path)
    # Killed on the third file: the server's batch limit is 2, so one batch was recorded.
    with pytest.raises(KeyboardInterrupt):
        Syncer(
            Client(live_tenant.url, key), dies_after(FsConnector(root, name="fs-k", acl_map=acl_map), 2)
        ).run()
    assert len(Client(live_tenant.url, key).connector_state("fs-k").documents) == 2
    transport = CountingTransport()
    resumed = Syncer(
        Client(live_tenant.url, key, transport=transport), FsConnector(root, name="fs-k", acl_map=acl_map)
    )
    report = resumed.run()
    assert (report.pushed, report.unchanged, report.failed) == (2, 2, 0)
    assert transport.sent.count("POST /v1/documents") == 1

    # Killed after the server accepted a batch but before the state said so: the restart
    # sends that batch again and the server finds it unchanged by content hash. (Another
    # tenant: in this one the same ids are fs-k's, which another connector may not overwrite.)
    key = live_tenant.key("ingest", tenant="globex")
    with pytest.raises(KeyboardInterrupt):
        Syncer(_DiesSavingState(live_tenant.url, key), FsConnector(root, name="fs-s", acl_map=acl_map)).run()
    again = Syncer(Client(live_tenant.url, key), FsConnector(root, name="fs-s", acl_map=acl_map)).run()
    assert again.pushed == 4
    client = Client(live_tenant.url, key)
    assert sum(client.job(j).documents.unchanged for j in again.job_ids) >= 2
    assert all(live_tenant.versions(rel, tenant="globex") == 1 for rel in FILES)


def test_posix_acl(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_text("x")
    f.chmod(0o640)
    rule = posix_rule(f.stat())
    assert rule.acl.principals[0].startswith("user:") and rule.acl.principals[1].startswith("group:")
    assert rule.acl.public is False
    f.chmod(0o600)
    assert len(posix_rule(f.stat()).acl.principals) == 1
    f.chmod(0o644)
    assert posix_rule(f.stat()).acl.public is True


def _cli_env(server: LiveServer, key: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "RAGLINE_API_URL": server.url, "RAGLINE_API_KEY": key}


def _ctrl_c_reaches_it() -> None:
    """In the child before exec: SIGINT at its default and unblocked, as a shell gives a
    foreground command (what the test stands in for). A child inherits an ignored SIGINT, and
    Python then installs no KeyboardInterrupt handler: a suite started in the background
    (`make test &`, `nohup`), where the shell ignores SIGINT, saw the watcher sit in
    watchfiles' wait after the test's Ctrl-C (twice, in full runs started that way)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_cli_connect_fs_json_tenant_check_and_watch(live_tenant: LiveServer, tmp_path: Path) -> None:
    root = _tree(tmp_path / "share")
    (tmp_path / "map.json").write_text(json.dumps(ACL_MAP))
    key = live_tenant.key("ingest")
    cmd = [
        sys.executable,
        "-m",
        "cli.main",
        "connect",
        "fs",
        str(root),
        "--acl-map",
        str(tmp_path / "map.json"),
    ]
    env = _cli_env(live_tenant, key)
    run = lambda *extra: subprocess.run(  # noqa: E731
        [*cmd, *extra], env=env, cwd=REPO, capture_output=True, text=True, timeout=180, check=False
    )
    first = run("--tenant", live_tenant.tenant, "--json")
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads(first.stdout.strip().splitlines()[-1]) == {
        "pushed": 4,
        "unchanged": 0,
        "deleted": 0,
        "acl_updated": 0,
        "groups_synced": 0,
        "failed": 0,
        "still_failing": 0,
        "skipped": SKIPPED,
        "warnings": NO_WARNINGS,
    }
    wrong = run("--tenant", "globex", "--json")
    assert wrong.returncode == 2 and f"tenant {live_tenant.tenant}" in wrong.stderr

    # stderr (progress, skipped files) goes to a file: a pipe nobody reads until the end fills
    # up on a slow machine and blocks the watcher's writes, so it could not exit on SIGINT.
    watch_log = tmp_path / "watch.stderr"
    with watch_log.open("w") as stderr:
        watch = subprocess.Popen(
            [*cmd, "--tenant", live_tenant.tenant, "--json", "--watch"],
            env={**env, "PYTHONFAULTHANDLER": "1"},  # SIGABRT dumps every thread's stack
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            preexec_fn=_ctrl_c_reaches_it,
        )
    assert watch.stdout is not None
    try:
        quiet = {"skipped": SKIPPED, "warnings": NO_WARNINGS}
        assert json.loads(watch.stdout.readline()) == {**_counts(unchanged=4), **quiet}
        time.sleep(0.5)  # the watcher is set up right after the first sync prints
        (root / "new.md").write_text("# Parking\n\nVisitors park on level two of the garage.\n")
        line = watch.stdout.readline()
        assert json.loads(line) == {**_counts(pushed=1, unchanged=4), **quiet}, line
    finally:
        watch.send_signal(signal.SIGINT)
        try:
            watch.wait(timeout=30)
        except subprocess.TimeoutExpired:  # say where it hangs, then fail
            watch.send_signal(signal.SIGABRT)
            watch.wait(timeout=30)
            handler, blocked = signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, [])
            pytest.fail(
                f"the watcher did not end on SIGINT (here: SIGINT handler {handler!r}, blocked {blocked});"
                f" its stacks:\n{watch_log.read_text()[-6000:]}"
            )
    assert watch.returncode == 0, watch_log.read_text()[-2000:]


def test_readme_connector_example_runs(live_tenant: LiveServer, capsys: pytest.CaptureFixture[str]) -> None:
    """The "Writing a connector" example in README.md, run as written against the server."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Writing a connector", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    pages = {
        "a": ("# Alpha\n\nThe alpha runbook.", ["group:eng"]),
        "b": ("# Beta\n\nBeta notes.", ["user:x"]),
    }
    code = code.replace("http://localhost:8000", live_tenant.url)
    exec(
        compile(code, "README.md", "exec"),
        {"fetch_pages": lambda: pages, "ingest_key": live_tenant.key("ingest")},
    )
    assert str(_counts(pushed=2)) in capsys.readouterr().out


def test_large_files_go_as_uploads(
    live_tenant: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("cli.connect.INLINE_MAX_BYTES", 10)
    root = _tree(tmp_path / "share")
    transport = CountingTransport()
    client = Client(live_tenant.url, live_tenant.key("ingest"), transport=transport)
    report = Syncer(client, FsConnector(root, name="fs-up", acl_map=_map(tmp_path))).run()
    assert report.summary() == _counts(pushed=4)
    assert transport.sent.count("POST /v1/documents:upload") == 4
    assert "POST /v1/documents" not in transport.sent


class _Directory(Connector):
    """A source of group memberships only (a directory service)."""

    name = "directory"

    def __init__(self, members: dict[str, list[str]]) -> None:
        self.members = members

    def list_items(self, cursor: str | None) -> Listing:
        return Listing(items=[], cursor="dir-cursor-1")

    def load(self, item: Item) -> DocumentIn:
        raise AssertionError("a directory has no documents")

    def groups(self) -> dict[str, list[str]]:
        return self.members


def test_groups_sync_incrementally(live_tenant: LiveServer) -> None:
    transport = CountingTransport()
    client = Client(live_tenant.url, live_tenant.key("ingest", "admin"), transport=transport)
    directory = _Directory({"user:ann": ["group:hr"], "user:bob": ["group:eng", "group:sre"]})
    assert Syncer(client, directory).run().summary()["groups_synced"] == 2  # in the summary too
    transport.sent.clear()
    assert Syncer(client, directory).run().groups_synced == 0
    assert [s for s in transport.writes() if "/principals/" in s] == []
    directory.members = {"user:ann": ["group:hr", "group:eng"]}  # bob left the directory
    assert Syncer(client, directory).run().groups_synced == 2
    state = client.connector_state("directory")
    assert set(state.groups) == {"user:ann"} and state.cursor == "dir-cursor-1"
    with psycopg.connect(live_tenant.db_url) as conn:
        rows = conn.execute(
            "SELECT principal_id, group_id FROM group_members WHERE tenant_id = %s ORDER BY 1, 2",
            (live_tenant.tenant,),
        ).fetchall()
    assert rows == [("user:ann", "group:eng"), ("user:ann", "group:hr")]


def test_acl_map_metadata_and_renames_reach_the_server(live_tenant: LiveServer, tmp_path: Path) -> None:
    """An ACL map's metadata edited alone re-sends the file, and the server applies the new
    metadata without a new version; the same content under a new path carries its new
    ``path``. Before: the fingerprint ignored the map's metadata and the server kept a
    document's old metadata whenever its content was unchanged."""
    root = tmp_path / "share"
    root.mkdir()
    (root / "runbook.md").write_text("# Runbook\n\nRestart the ingestion workers after a failover drill.\n")
    client = Client(live_tenant.url, live_tenant.key("ingest"))
    reader = Client(live_tenant.url, live_tenant.key("query", principal="user:ann"))
    rules = {"*": {"public": True, "metadata": {"team": "sre"}}}
    connector = FsConnector(root, name="fs-meta", acl_map=_map(tmp_path, rules))
    assert Syncer(client, connector).run().summary() == _counts(pushed=1)

    def metadata() -> dict:
        hits = reader.retrieve("restart the ingestion workers").results
        assert hits and hits[0].document_external_id == "runbook.md"
        return dict(hits[0].metadata)

    assert metadata()["team"] == "sre"
    connector.acl_map = _map(tmp_path, {"*": {"public": True, "metadata": {"team": "platform"}}})
    assert Syncer(client, connector).run().summary() == _counts(pushed=1)
    assert metadata()["team"] == "platform" and live_tenant.versions("runbook.md") == 1
    assert Syncer(client, connector).run().summary() == _counts(unchanged=1)

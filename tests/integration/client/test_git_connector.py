"""The Git connector against real repositories the tests create with the ``git`` CLI and a
real server: first sync, a no-change sync that writes nothing, a commit that adds, modifies,
deletes and renames (the renamed file keeps its id), readers from the ACL map and CODEOWNERS
whose change alone is an ACL PUT that locks the removed reader out, a force-push through a
mirrored URL (full resync), a killed sync resumed, and ``ragline connect git --json``.
One server for the module, a tenant per test (``live_tenant``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from cli.connect import AclMap
from cli.connect_sources import CodeOwners
from ingest.files import MIME_BY_SUFFIX
from ragline_client import Client, Syncer
from ragline_client.git_source import GitConnector, GitRepo
from tests.integration.client.conftest import CountingTransport, LiveServer, dies_after

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
FILES = {
    "runbooks/failover.md": "# Failover\n\nPromote the standby with pg_ctl promote, then repoint.\n",
    "lunch.txt": "Monday: soup. Tuesday: pasta with tomato sauce. Wednesday: fish and chips.\n",
    "guide/vpn.html": "<html><body><h1>VPN</h1><p>Install the wireguard profile on the laptop.</p></body>",
    "hr/pay.txt": "Confidential salary bands for the engineering ladder.\n",
    "tool.bin": "\x00\x01 not a supported type",
}
ACL_MAP = {"hr/*": {"principals": ["user:ann", "user:bob"]}, "*": {"public": True}}


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Ada Lovelace",
        "GIT_AUTHOR_EMAIL": "ada@example.com",
        "GIT_COMMITTER_NAME": "Ada Lovelace",
        "GIT_COMMITTER_EMAIL": "ada@example.com",
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def make_repo(path: Path, files: dict[str, str] = FILES) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "--quiet", "--initial-branch=main")
    write(path, files)
    git(path, "add", "-A")
    git(path, "commit", "--quiet", "-m", "first")
    return path


def write(repo: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def acl_map(tmp_path: Path, rules: dict = ACL_MAP) -> AclMap:
    path = tmp_path / "acl-map.json"
    path.write_text(json.dumps(rules))
    return AclMap.load(path)


def connector(repo: GitRepo, client: Client, name: str, rules: AclMap, **kw: object) -> GitConnector:
    return GitConnector(
        repo,
        ref="main",
        name=name,
        rules=rules,
        mime_by_suffix=MIME_BY_SUFFIX,
        known=lambda: client.connector_state(name).documents,
        **kw,  # type: ignore[arg-type]
    )


def ids(client: Client, query: str) -> list[str]:
    return [r.document_external_id for r in client.retrieve(query).results]


def hit(client: Client, query: str, external_id: str) -> dict:
    return next(r.metadata for r in client.retrieve(query).results if r.document_external_id == external_id)


def test_incremental_by_diff_renames_keep_ids_and_acl_change_locks_out(
    live_tenant: LiveServer, tmp_path: Path
) -> None:
    work = make_repo(tmp_path / "work")
    transport = CountingTransport()
    client = Client(live_tenant.url, live_tenant.key("ingest"), transport=transport)
    bob = Client(live_tenant.url, live_tenant.key("query", principal="user:bob"))
    ann = Client(live_tenant.url, live_tenant.key("query", principal="user:ann"))
    repo = GitRepo.open(str(work), cache_dir=tmp_path / "cache")
    conn = connector(repo, client, "git-work", acl_map(tmp_path))

    first = Syncer(client, conn).run()
    assert (first.pushed, first.unchanged, first.deleted, first.failed) == (4, 0, 0, 0)
    head = git(work, "rev-parse", "HEAD")
    assert client.connector_state("git-work").cursor == head
    meta = hit(bob, "salary bands engineering ladder", "hr/pay.txt")
    assert (meta["commit"], meta["author"], meta["path"]) == (head, "Ada Lovelace", "hr/pay.txt")
    assert meta["committed_at"].startswith("20") and meta["ref"] == "main"

    transport.sent.clear()
    again = Syncer(client, conn).run()
    assert (again.pushed, again.unchanged, again.deleted) == (0, 4, 0)
    assert transport.writes() == [] and not conn.full_resync

    # One commit that modifies, deletes, renames and adds.
    write(work, {"runbooks/failover.md": FILES["runbooks/failover.md"] + "\nCheck replication lag after.\n"})
    (work / "lunch.txt").unlink()
    git(work, "mv", "guide/vpn.html", "guide/wireguard.html")
    write(
        work,
        {"runbooks/restore.md": "# Restore\n\nRestore the base backup with pg_basebackup and replay WAL.\n"},
    )
    second = commit(work, "edit, delete, rename, add")
    changed = Syncer(client, conn).run()
    assert conn.changes == {"added": 1, "modified": 1, "deleted": 1, "renamed": 1}
    assert (changed.pushed, changed.unchanged, changed.deleted, changed.failed) == (3, 1, 1, 0)
    assert "lunch.txt" not in ids(bob, "soup pasta fish")
    assert "runbooks/restore.md" in ids(bob, "restore base backup replay WAL")
    # The renamed file keeps the id it had: one document, no duplicate under the new path;
    # the unchanged re-push updates its metadata, so it names the new path.
    assert "guide/vpn.html" in ids(bob, "install the wireguard profile laptop")
    renamed = hit(bob, "install the wireguard profile laptop", "guide/vpn.html")
    assert renamed["path"] == "guide/wireguard.html"
    assert "guide/wireguard.html" not in ids(bob, "install the wireguard profile laptop")
    assert live_tenant.versions("guide/vpn.html") == 1
    assert client.connector_state("git-work").documents["guide/vpn.html"].startswith("git:")
    assert hit(bob, "restore base backup replay WAL", "runbooks/restore.md")["commit"] == second
    # The untouched file keeps the commit that last changed it, not the new head.
    assert hit(bob, "salary bands engineering ladder", "hr/pay.txt")["commit"] == head

    # A second rename of the same file: the id still follows it.
    git(work, "mv", "guide/wireguard.html", "vpn.html")
    commit(work, "move again")
    assert Syncer(client, conn).run().deleted == 0
    assert {"guide/vpn.html", "vpn.html"} & set(ids(bob, "install the wireguard profile laptop")) == {
        "guide/vpn.html"
    }
    assert ":vpn.html|acl:" in client.connector_state("git-work").documents["guide/vpn.html"]

    # bob leaves the ACL map's hr rule: an ACL-only update, no re-ingest, and he is out.
    assert "hr/pay.txt" in ids(bob, "salary bands engineering ladder")
    conn.rules = acl_map(tmp_path, {"hr/*": {"principals": ["user:ann"]}, "*": {"public": True}})
    transport.sent.clear()
    acl = Syncer(client, conn).run()
    assert (acl.acl_updated, acl.pushed) == (1, 0)
    assert [s for s in transport.writes() if "/documents" in s] == ["PUT /v1/documents/hr/pay.txt/acl"]
    assert live_tenant.versions("hr/pay.txt") == 1
    assert "hr/pay.txt" not in ids(bob, "salary bands engineering ladder")
    assert "hr/pay.txt" in ids(ann, "salary bands engineering ladder")


def test_codeowners_are_readers_and_their_change_is_acl_only(live_tenant: LiveServer, tmp_path: Path) -> None:
    work = make_repo(tmp_path / "work", {**FILES, ".github/CODEOWNERS": "* @ann\n/hr/ @bob @acme/payroll\n"})
    client = Client(live_tenant.url, live_tenant.key("ingest"))
    bob = Client(live_tenant.url, live_tenant.key("query", principal="user:bob"))
    carol = Client(live_tenant.url, live_tenant.key("query", principal="user:carol"))
    Client(live_tenant.url, live_tenant.key("admin")).set_groups("user:carol", ["group:acme/payroll"])
    repo = GitRepo.open(str(work), cache_dir=tmp_path / "cache")
    conn = connector(repo, client, "git-co", acl_map(tmp_path, {"*.md": {"principals": ["user:dan"]}}))
    conn.owners = CodeOwners(repo)

    first = Syncer(client, conn).run()
    assert (first.pushed, first.failed) == (4, 0)
    acl = {i.external_id: i.acl.principals for i in conn.list_items(None).items}
    assert acl["hr/pay.txt"] == ["group:acme/payroll", "user:bob"]  # the last match wins
    assert acl["runbooks/failover.md"] == ["user:ann", "user:dan"]  # map and owners together
    assert "hr/pay.txt" in ids(bob, "salary bands engineering ladder")
    assert "hr/pay.txt" in ids(carol, "salary bands engineering ladder")

    write(work, {".github/CODEOWNERS": "* @ann\n/hr/ @acme/payroll\n"})
    commit(work, "bob no longer owns hr")
    report = Syncer(client, conn).run()
    assert (report.acl_updated, report.pushed) == (1, 0)
    assert "hr/pay.txt" not in ids(bob, "salary bands engineering ladder")
    assert "hr/pay.txt" in ids(carol, "salary bands engineering ladder")


def test_force_push_through_a_mirrored_url_is_a_full_resync(live_tenant: LiveServer, tmp_path: Path) -> None:
    work = make_repo(tmp_path / "work")
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(origin)], check=True)
    git(work, "remote", "add", "origin", str(origin))
    git(work, "push", "--quiet", "origin", "main")
    client = Client(live_tenant.url, live_tenant.key("ingest"))
    reader = Client(live_tenant.url, live_tenant.key("query", principal="user:ann"))
    url = origin.as_uri()

    def sync() -> tuple[GitConnector, object]:
        repo = GitRepo.open(url, cache_dir=tmp_path / "cache")
        conn = connector(repo, client, "git-url", acl_map(tmp_path))
        try:
            return conn, Syncer(client, conn).run()
        finally:
            conn.close()

    sync()
    git(work, "mv", "guide/vpn.html", "guide/wireguard.html")
    commit(work, "rename")
    git(work, "push", "--quiet", "origin", "main")
    conn, report = sync()
    assert not conn.full_resync and conn.changes == {"renamed": 1}
    assert "guide/vpn.html" in ids(reader, "install the wireguard profile laptop")

    # Rewrite history: a new root commit without lunch.txt, the runbook edited, force-pushed.
    old_head = git(work, "rev-parse", "HEAD")
    git(work, "checkout", "--quiet", "--orphan", "rewritten")
    (work / "lunch.txt").unlink()
    write(work, {"runbooks/failover.md": "# Failover\n\nFail over with Patroni: patronictl switchover.\n"})
    git(work, "add", "-A")
    git(work, "commit", "--quiet", "-m", "rewritten")
    git(work, "push", "--quiet", "--force", "origin", "rewritten:main")
    conn, report = sync()
    assert conn.full_resync and conn.commit != old_head
    assert client.connector_state("git-url").cursor == conn.commit
    assert "lunch.txt" not in ids(reader, "soup pasta fish")
    assert "runbooks/failover.md" in ids(reader, "patronictl switchover")
    # A full resync re-keys the renamed file by its path: the old id is deleted.
    found = ids(reader, "install the wireguard profile laptop")
    assert "guide/wireguard.html" in found and "guide/vpn.html" not in found
    assert set(client.connector_state("git-url").documents) == {
        "runbooks/failover.md",
        "guide/wireguard.html",
        "hr/pay.txt",
    }


def test_killed_sync_resumes(live_tenant: LiveServer, tmp_path: Path) -> None:
    work = make_repo(tmp_path / "work")
    client = Client(live_tenant.url, live_tenant.key("ingest"))
    repo = GitRepo.open(str(work), cache_dir=tmp_path / "cache")
    rules = acl_map(tmp_path)
    killed = dies_after(
        GitConnector(
            repo,
            ref="main",
            name="git-k",
            rules=rules,
            mime_by_suffix=MIME_BY_SUFFIX,
            known=lambda: client.connector_state("git-k").documents,
        ),
        2,
    )
    with pytest.raises(KeyboardInterrupt):
        Syncer(client, killed).run()
    state = client.connector_state("git-k")
    assert len(state.documents) == 2 and state.cursor is None  # the cursor moves only at the end
    report = Syncer(client, connector(repo, client, "git-k", rules)).run()
    assert (report.pushed, report.unchanged, report.failed) == (2, 2, 0)
    assert client.connector_state("git-k").cursor == git(work, "rev-parse", "HEAD")


def test_cli_connect_git_json(live_tenant: LiveServer, tmp_path: Path) -> None:
    work = make_repo(tmp_path / "work")
    (tmp_path / "map.json").write_text(json.dumps({"hr/*": {"principals": ["user:ann"]}}))
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAGLINE_API_URL": live_tenant.url}
    env["RAGLINE_API_KEY"] = live_tenant.key("ingest")
    cmd = [
        sys.executable,
        "-m",
        "cli.main",
        "connect",
        "git",
        str(work),
        "--acl-map",
        str(tmp_path / "map.json"),
    ]
    cmd += ["--tenant", live_tenant.tenant, "--json", "--cache-dir", str(tmp_path / "cache")]
    run = lambda *extra: subprocess.run(  # noqa: E731
        [*cmd, *extra], env=env, cwd=REPO, capture_output=True, text=True, timeout=180, check=False
    )
    first = run()
    # Three files no rule covers fail visibly (exit 3) and are retried once the map covers them.
    assert first.returncode == 3, first.stderr[-2000:]
    summary = json.loads(first.stdout.strip().splitlines()[-1])
    assert (summary["pushed"], summary["failed"]) == (1, 3)
    (tmp_path / "map.json").write_text(json.dumps(ACL_MAP))
    second = run()
    assert second.returncode == 0, second.stderr[-2000:]
    summary = json.loads(second.stdout.strip().splitlines()[-1])
    # hr/pay.txt gained bob: an ACL update, not a push.
    assert (summary["pushed"], summary["unchanged"], summary["failed"]) == (3, 0, 0)
    missing = run("--ref", "no-such-branch")
    assert missing.returncode == 2 and "no-such-branch" in missing.stderr
    option = run("--ref=--output=/tmp/x")
    assert option.returncode == 2 and "is not a ref" in option.stderr
    gone = subprocess.run(
        [*cmd[:5], str(tmp_path / "nowhere"), *cmd[6:]], env=env, cwd=REPO, capture_output=True, text=True
    )
    assert gone.returncode == 2 and "error" in gone.stderr


def test_committed_links_and_dotdot_entries_are_never_read(live_tenant: LiveServer, tmp_path: Path) -> None:
    marker = "PGPASSFILE-MARKER-c0de"
    secret = tmp_path / "outside" / "pgpass.md"
    secret.parent.mkdir()
    secret.write_text(f"# Passwords\n\nlocalhost:5432:*:ragline:{marker}\n")
    work = make_repo(tmp_path / "work", {"guide.md": "# Guide\n\nBadge office hours are nine to five.\n"})
    (work / "leak.md").symlink_to(secret)  # committed as mode 120000: a path on the host
    (work / "rel.md").symlink_to(os.path.relpath(secret, work))
    commit(work, "links")
    # A tree entry named '..' (``git mktree`` accepts it): its file's path would be '../x.md'.
    blob = _git_in(work, ["hash-object", "-w", "--stdin"], f"# X\n\n{marker}\n")
    sub = _git_in(work, ["mktree"], f"100644 blob {blob}\tx.md\n")
    entries = git(work, "ls-tree", "HEAD") + f"\n040000 tree {sub}\t..\n"
    head = git(work, "commit-tree", _git_in(work, ["mktree"], entries), "-p", "HEAD", "-m", "dotdot")
    git(work, "update-ref", "refs/heads/main", head)
    (tmp_path / "map.json").write_text(json.dumps({"*": {"public": True}}))
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAGLINE_API_URL": live_tenant.url}
    env["RAGLINE_API_KEY"] = live_tenant.key("ingest")
    argv = ["connect", "git", str(work), "--acl-map", str(tmp_path / "map.json"), "--name", "git-links"]
    argv += ["--tenant", live_tenant.tenant, "--json", "--cache-dir", str(tmp_path / "cache")]
    cmd = [sys.executable, "-m", "cli.main", *argv]
    run = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=180, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert (summary["pushed"], summary["skipped"]) == (1, 3)
    assert "skipped '../x.md'" in run.stderr and "'leak.md': a symbolic link is never followed" in run.stderr
    assert "'rel.md': a symbolic link" in run.stderr
    client = Client(live_tenant.url, live_tenant.key("ingest"))
    assert sorted(client.connector_state("git-links").documents) == ["guide.md"]
    with psycopg.connect(live_tenant.db_url) as conn:
        leaked = conn.execute("SELECT count(*) FROM chunks WHERE strpos(text, %s) > 0", (marker,)).fetchone()
    assert leaked == (0,)


def _git_in(repo: Path, args: list[str], stdin: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], input=stdin, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()

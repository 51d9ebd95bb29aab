"""The IMAP connector against a real Dovecot (started by the test on loopback: two users,
a shared namespace, the ACL plugin) and a real ragline server: messages as documents with
their headers as metadata, readers from the owner and the folder's ACL, a SETACL that
removes a reader reaching ragline as an ACL-only update that locks them out, an expunged
message deleted, a recreated folder (new UIDVALIDITY) synced again in full, a killed sync
resumed, and ``ragline connect imap --json``. Dovecot and the ragline server are the module's;
each test syncs into a tenant of its own (``live_tenant``)."""

from __future__ import annotations

import imaplib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path

import pytest

from bench import dovecot as dv
from ragline_client import Client, Syncer
from ragline_client.imap_source import ImapConnector
from tests.integration.client.conftest import CountingTransport, LiveServer, dies_after

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not dv.available(), reason="dovecot-imapd is not installed"),
]
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def server() -> Iterator[dv.Dovecot]:
    with dv.dovecot() as running:
        yield running


def message(subject: str, body: str, *, mid: str, html: bool = False) -> bytes:
    kind = "text/html" if html else "text/plain"
    return (
        f"From: Ann <ann@example.com>\r\nTo: Bob <bob@example.com>\r\nCc: sre@example.com\r\n"
        f"Subject: {subject}\r\nMessage-ID: <{mid}@example.com>\r\nDate: Tue, 01 Dec 2026 10:00:00 +0000\r\n"
        f"MIME-Version: 1.0\r\nContent-Type: {kind}; charset=utf-8\r\n\r\n{body}\r\n"
    ).encode()


def login(server: dv.Dovecot, user: str) -> imaplib.IMAP4:
    imap = imaplib.IMAP4(server.host, server.port)
    imap.login(user, server.password)
    return imap


def mailbox(server: dv.Dovecot, folder: str) -> imaplib.IMAP4:
    """ann's ``folder``, created fresh with two messages, readable by bob."""
    imap = login(server, "ann")
    imap.delete(f'"{folder}"')
    assert imap.create(f'"{folder}"')[0] == "OK"
    imap.append(
        f'"{folder}"',
        None,
        None,
        message("Failover plan", "Promote the standby with pg_ctl promote.", mid="f1"),
    )
    imap.append(
        f'"{folder}"',
        None,
        None,
        message("Lunch", "<p>Monday soup, Tuesday pasta, Wednesday fish and chips.</p>", mid="f2", html=True),
    )
    assert imap.setacl(f'"{folder}"', "bob", "lr")[0] == "OK"
    return imap


def connector(server: dv.Dovecot, name: str) -> ImapConnector:
    return ImapConnector(server.host, server.port, user="ann", password=server.password, name=name)


def ids(client: Client, query: str) -> list[str]:
    return [r.document_external_id for r in client.retrieve(query).results]


def test_folder_acl_expunge_and_uidvalidity(live_tenant: LiveServer, server: dv.Dovecot) -> None:
    ann_imap = mailbox(server, "Team")
    ann_imap.append(
        "INBOX", None, None, message("Pay bands", "Confidential salary bands for the ladder.", mid="p1")
    )
    transport = CountingTransport()
    client = Client(live_tenant.url, live_tenant.key("ingest"), transport=transport)
    bob = Client(live_tenant.url, live_tenant.key("query", principal="user:bob"))
    ann = Client(live_tenant.url, live_tenant.key("query", principal="user:ann"))
    conn = connector(server, "imap-ann")

    first = Syncer(client, conn).run()
    assert (first.pushed, first.failed) == (3, 0), first.errors
    assert conn.acl_source == {"INBOX": "getacl", "Team": "getacl"}
    hit = next(r for r in bob.retrieve("promote the standby").results if "Team" in r.document_external_id)
    assert hit.title == "Failover plan"
    assert hit.metadata["folder"] == "Team" and hit.metadata["message_id"] == "<f1@example.com>"
    assert "bob@example.com" in str(hit.metadata["to"]) and "sre@example.com" in str(hit.metadata["cc"])
    assert ";UIDVALIDITY=" in hit.document_external_id and hit.document_external_id.endswith(";UID=1")
    assert any("Team" in i for i in ids(bob, "soup pasta fish chips"))  # the HTML body
    assert not any("INBOX" in i for i in ids(bob, "salary bands ladder"))  # ann's alone
    assert any("INBOX" in i for i in ids(ann, "salary bands ladder"))

    transport.sent.clear()
    again = Syncer(client, conn).run()
    assert (again.pushed, again.unchanged) == (0, 3) and transport.writes() == []

    # ann takes bob off the folder's ACL: two ACL-only updates, bob is out, ann is not.
    assert ann_imap.deleteacl('"Team"', "bob")[0] == "OK"
    transport.sent.clear()
    acl = Syncer(client, conn).run()
    assert (acl.acl_updated, acl.pushed, acl.deleted) == (2, 0, 0)
    assert not [s for s in transport.writes() if s.startswith("POST /v1/documents")]
    assert not any("Team" in i for i in ids(bob, "promote the standby"))
    assert any("Team" in i for i in ids(ann, "promote the standby"))

    # An expunged message is deleted.
    ann_imap.select('"Team"')
    ann_imap.uid("STORE", "2", "+FLAGS", "(\\Deleted)")
    ann_imap.expunge()
    gone = Syncer(client, conn).run()
    assert (gone.deleted, gone.pushed) == (1, 0)
    recorded = client.connector_state("imap-ann").documents
    expunged = next(i for i in recorded if "Team" in i).rsplit(";UID=", 1)[0] + ";UID=2"
    assert len(recorded) == 2 and expunged not in recorded
    assert expunged not in ids(ann, "soup pasta fish chips")

    # The folder deleted and recreated: a new UIDVALIDITY, its messages synced anew.
    ann_imap.close()
    ann_imap.delete('"Team"')
    ann_imap.create('"Team"')
    ann_imap.append(
        '"Team"', None, None, message("Failover plan", "Promote the standby with pg_ctl promote.", mid="f1")
    )
    resync = Syncer(client, conn).run()
    assert conn.full_resync == ["Team"]
    assert (resync.pushed, resync.deleted) == (1, 1)
    assert len([i for i in ids(ann, "promote the standby") if "Team" in i]) == 1
    conn.close()
    ann_imap.logout()


ANN = "Ann <ann@example.com>"


def with_attachments() -> bytes:
    mail = EmailMessage()
    mail["From"], mail["To"], mail["Subject"] = ANN, "bob@example.com", "Runbooks"
    mail["Message-ID"] = "<att1@example.com>"
    mail.set_content("Both runbooks are attached.")
    runbook = "# Rotating certificates\n\nRenew the wildcard certificate with certbot, then reload nginx.\n"
    mail.add_attachment(runbook.encode(), maintype="text", subtype="markdown", filename="certs.md")
    mail.add_attachment(b"\x00\x01\x02", maintype="application", subtype="octet-stream", filename="dump.bin")
    return mail.as_bytes()


def test_attachments_are_linked_documents(live_tenant: LiveServer, server: dv.Dovecot) -> None:
    """An attachment of a parsed type is a document of its own, linked to its message by
    ``parent_external_id``, read by whoever reads the message, following the folder's ACL
    changes and deleted with the message; one of another type is listed as skipped."""
    imap = login(server, "ann")
    imap.delete('"Att"')
    assert imap.create('"Att"')[0] == "OK"
    imap.append('"Att"', None, None, with_attachments())
    assert imap.setacl('"Att"', "bob", "lr")[0] == "OK"
    transport = CountingTransport()
    client = Client(live_tenant.url, live_tenant.key("ingest"), transport=transport)
    bob = Client(live_tenant.url, live_tenant.key("query", principal="user:bob"))
    ann = Client(live_tenant.url, live_tenant.key("query", principal="user:ann"))
    conn = connector(server, "imap-att")

    def att() -> list[str]:  # ann's other folders (earlier tests) sync too: count this one's
        return sorted(i for i in client.connector_state("imap-att").documents if "/Att;" in i)

    first = Syncer(client, conn).run()
    assert first.failed == 0 and len(att()) == 2, first.errors  # the message and certs.md
    hit = next(
        r
        for r in bob.retrieve("renew the wildcard certificate certbot").results
        if "Att" in r.document_external_id
    )
    message_id = hit.metadata["parent_external_id"]
    assert hit.document_external_id == f"{message_id}#attachment=1" and hit.title == "certs.md"
    assert hit.metadata["message_id"] == "<att1@example.com>" and hit.metadata["folder"] == "Att"
    # The message's metadata is the attachment's too: a filter on its sender finds what it sent.
    assert hit.metadata["from"] == ANN and hit.metadata["mailbox_owner"] == "ann"
    sent = bob.retrieve("renew the wildcard certificate certbot", filters={"metadata": {"from": ANN}})
    assert f"{message_id}#attachment=1" in [r.document_external_id for r in sent.results]
    parent = next(
        r for r in ann.retrieve("both runbooks are attached").results if r.document_external_id == message_id
    )
    assert parent.metadata["attachments"] == "certs.md"
    assert "dump.bin (application/octet-stream)" in str(parent.metadata["attachments_skipped"])

    transport.sent.clear()
    again = Syncer(client, conn).run()
    assert (again.pushed, again.deleted) == (0, 0) and transport.writes() == []

    assert imap.deleteacl('"Att"', "bob")[0] == "OK"  # the folder's ACL reaches the attachment too
    acl = Syncer(client, conn).run()
    assert (acl.acl_updated, acl.pushed) == (2, 0)  # the message and its attachment
    assert not any("Att" in i for i in ids(bob, "renew the wildcard certificate certbot"))
    assert any("Att" in i for i in ids(ann, "renew the wildcard certificate certbot"))

    imap.select('"Att"')
    imap.uid("STORE", "1", "+FLAGS", "(\\Deleted)")
    imap.expunge()
    gone = Syncer(client, conn).run()
    assert (gone.deleted, gone.pushed) == (2, 0)  # the message and its attachment
    assert att() == []
    assert not any("Att" in i for i in ids(ann, "renew the wildcard certificate certbot"))
    conn.close()
    imap.logout()


def test_condstore_skips_unchanged_folders(live_tenant: LiveServer, server: dv.Dovecot) -> None:
    """With CONDSTORE (Dovecot offers it) a folder whose HIGHESTMODSEQ, UIDNEXT, message count
    and ACL match the cursor is not listed at all; a new message, an expunge, a flag change
    or an ACL change lists it again."""
    imap = mailbox(server, "Cond")
    client = Client(live_tenant.url, live_tenant.key("ingest"))
    conn = connector(server, "imap-cond")
    first = Syncer(client, conn).run()
    assert conn.condstore and "Cond" in conn.searched and first.failed == 0
    recorded = len(client.connector_state("imap-cond").documents)

    quiet = Syncer(client, conn).run()
    assert conn.searched == [] and (quiet.pushed, quiet.deleted, quiet.unchanged) == (0, 0, recorded)

    imap.append('"Cond"', None, None, message("Pager", "Acknowledge the page within five minutes.", mid="c3"))
    new = Syncer(client, conn).run()
    assert conn.searched == ["Cond"] and (new.pushed, new.deleted) == (1, 0)
    assert Syncer(client, conn).run().pushed == 0 and conn.searched == []

    imap.select('"Cond"')
    imap.uid("STORE", "1", "+FLAGS", "(\\Seen)")  # a flag moves HIGHESTMODSEQ: listed, nothing sent
    seen = Syncer(client, conn).run()
    assert conn.searched == ["Cond"] and (seen.pushed, seen.deleted) == (0, 0)

    imap.uid("STORE", "2", "+FLAGS", "(\\Deleted)")
    imap.expunge()
    gone = Syncer(client, conn).run()
    assert conn.searched == ["Cond"] and gone.deleted == 1

    assert imap.deleteacl('"Cond"', "bob")[0] == "OK"
    acl = Syncer(client, conn).run()
    assert conn.searched == ["Cond"] and acl.acl_updated == 2
    assert Syncer(client, conn).run().acl_updated == 0 and conn.searched == []
    conn.close()
    imap.logout()


def test_killed_sync_resumes(live_tenant: LiveServer, server: dv.Dovecot) -> None:
    imap = mailbox(server, "Ops")
    imap.append('"Ops"', None, None, message("Backups", "Restore the base backup and replay WAL.", mid="o3"))
    imap.logout()
    client = Client(live_tenant.url, live_tenant.key("ingest"))
    killed = dies_after(
        ImapConnector(server.host, server.port, user="ann", password=server.password, name="imap-k"), 2
    )
    with pytest.raises(KeyboardInterrupt):
        Syncer(client, killed).run()
    killed.close()
    recorded = len(client.connector_state("imap-k").documents)
    assert recorded == 2
    conn = connector(server, "imap-k")
    report = Syncer(client, conn).run()
    conn.close()
    assert report.failed == 0 and report.pushed >= 1
    assert len(client.connector_state("imap-k").documents) == recorded + report.pushed


def test_cli_connect_imap_json(live_tenant: LiveServer, server: dv.Dovecot, tmp_path: Path) -> None:
    mailbox(server, "Cli").logout()
    (tmp_path / "pw").write_text(server.password + "\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAGLINE_API_URL": live_tenant.url}
    env["RAGLINE_API_KEY"] = live_tenant.key("ingest")
    url = f"imap://ann@{server.host}:{server.port}"
    cmd = [sys.executable, "-m", "cli.main", "connect", "imap"]
    opts = ["--password-file", str(tmp_path / "pw"), "--tenant", live_tenant.tenant, "--json"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cmd, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=180)

    first = run(url, *opts)
    assert first.returncode == 0, first.stderr[-2000:]
    summary = json.loads(first.stdout.strip().splitlines()[-1])
    assert summary["failed"] == 0 and summary["pushed"] >= 2
    second = json.loads(run(url, *opts).stdout.strip().splitlines()[-1])
    assert second["pushed"] == 0 and second["unchanged"] == summary["pushed"]
    (tmp_path / "bad").write_text("wrong\n")
    bad = run(url, "--password-file", str(tmp_path / "bad"), "--tenant", live_tenant.tenant, "--json")
    assert bad.returncode == 2 and "LOGIN" in bad.stderr.upper()

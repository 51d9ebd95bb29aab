"""The SQL connector against a second real PostgreSQL database (on the test session's
server) and a real ragline server: rows as documents, incremental by a monotonic column,
deletes by a tombstone or by keyset comparison, readers from a join table or an array
column whose change alone is an ACL PUT that locks the removed reader out, a killed sync
resumed, and ``ragline connect sql --json``.
One server for the module, a tenant per test (``live_tenant``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from cli.connect_sql import SqlConnector, SqlSpec
from ragline_client import Client, Syncer
from tests.integration.client.conftest import CountingTransport, LiveServer, dies_after

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
SCHEMA = """
CREATE TABLE articles (
    id integer PRIMARY KEY,
    title text NOT NULL,
    body text NOT NULL,
    team text,
    stars integer,
    readers text[] NOT NULL DEFAULT '{}',
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    deleted boolean NOT NULL DEFAULT false
);
CREATE TABLE article_readers (article_id integer NOT NULL, principal text NOT NULL);
INSERT INTO articles (id, title, body, team, stars, readers) VALUES
 (1, 'Failover', 'Promote the standby with pg_ctl promote, then repoint the pooler.', 'sre', 5,
  '{user:ann,user:bob}'),
 (2, 'Pay bands', 'Confidential salary bands for the engineering ladder.', 'hr', 1, '{user:ann,user:bob}'),
 (3, 'Lunch', 'Monday: soup. Tuesday: pasta with tomato sauce. Wednesday: fish and chips.', NULL, 0,
  '{user:bob}');
INSERT INTO article_readers VALUES (1, 'user:ann'), (1, 'user:bob'), (2, 'user:ann'), (2, 'user:bob'),
 (3, 'user:bob'), (3, 'not a principal');
"""
JOINED = """
query = "SELECT id, title, body, team, stars, updated_at, deleted FROM articles"
key = "id"
title = "title"
text = ["body"]
metadata = ["team", "stars"]
updated = "updated_at"
tombstone = "deleted"
acl_query = "SELECT article_id, principal FROM article_readers"
"""
ARRAY = """
query = "SELECT id, title, body, readers FROM articles"
key = "id"
title = "title"
text = ["title", "body"]
acl_column = "readers"
"""


@pytest.fixture
def source_db(pg_url: str) -> Iterator[str]:
    """A second database on the session's PostgreSQL, holding the source tables."""
    name = f"source_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = make_conninfo(pg_url, dbname=name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SCHEMA)
    try:
        yield url
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def execute(url: str, statement: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


def spec(tmp_path: Path, text: str) -> SqlSpec:
    path = tmp_path / "query.toml"
    path.write_text(text)
    return SqlSpec.load(path)


def ids(client: Client, query: str) -> list[str]:
    return [r.document_external_id for r in client.retrieve(query).results]


def test_join_table_readers_monotonic_column_and_tombstones(
    live_tenant: LiveServer, source_db: str, tmp_path: Path
) -> None:
    transport = CountingTransport()
    client = Client(live_tenant.url, live_tenant.key("ingest"), transport=transport)
    bob = Client(live_tenant.url, live_tenant.key("query", principal="user:bob"))
    ann = Client(live_tenant.url, live_tenant.key("query", principal="user:ann"))
    conn = SqlConnector(
        source_db,
        spec(tmp_path, JOINED),
        name="sql-a",
        known=lambda: client.connector_state("sql-a").documents,
    )

    first = Syncer(client, conn).run()
    assert (first.pushed, first.unchanged, first.deleted, first.failed) == (3, 0, 0, 0)
    cursor = client.connector_state("sql-a").cursor
    assert cursor is not None and cursor.startswith("20")
    hit = next(
        r for r in bob.retrieve("salary bands engineering ladder").results if r.document_external_id == "2"
    )
    assert (hit.title, hit.metadata["team"], hit.metadata["stars"]) == ("Pay bands", "hr", 1)
    assert "3" not in ids(ann, "soup pasta fish")  # the invalid reader entry grants nothing

    transport.sent.clear()
    again = Syncer(client, conn).run()
    assert (again.pushed, again.unchanged) == (0, 3) and transport.writes() == []

    # One row edited (its updated_at moves), one tombstoned, one inserted.
    execute(
        source_db,
        "UPDATE articles SET body = body || ' Check replication lag.', updated_at = now() WHERE id = 1",
    )
    execute(source_db, "UPDATE articles SET deleted = true, updated_at = now() WHERE id = 3")
    execute(
        source_db,
        "INSERT INTO articles (id, title, body)"
        " VALUES (4, 'Restore', 'Restore the base backup and replay WAL.');"
        " INSERT INTO article_readers VALUES (4, 'user:bob')",
    )
    changed = Syncer(client, conn).run()
    assert (changed.pushed, changed.unchanged, changed.deleted, changed.failed) == (2, 1, 1, 0)
    assert live_tenant.versions("1") == 2 and live_tenant.versions("2") == 1
    assert "3" not in ids(bob, "soup pasta fish")
    assert "4" in ids(bob, "restore base backup replay WAL")

    # bob leaves the join table for row 2; the row itself is untouched: an ACL-only update.
    assert "2" in ids(bob, "salary bands engineering ladder")
    execute(source_db, "DELETE FROM article_readers WHERE article_id = 2 AND principal = 'user:bob'")
    transport.sent.clear()
    acl = Syncer(client, conn).run()
    assert (acl.acl_updated, acl.pushed, acl.deleted) == (1, 0, 0)
    assert [s for s in transport.writes() if "/documents" in s] == ["PUT /v1/documents/2/acl"]
    assert live_tenant.versions("2") == 1
    assert "2" not in ids(bob, "salary bands engineering ladder")
    assert "2" in ids(ann, "salary bands engineering ladder")


def test_array_readers_and_keyset_deletes(live_tenant: LiveServer, source_db: str, tmp_path: Path) -> None:
    client = Client(live_tenant.url, live_tenant.key("ingest"))
    bob = Client(live_tenant.url, live_tenant.key("query", principal="user:bob"))
    conn = SqlConnector(
        source_db,
        spec(tmp_path, ARRAY),
        name="sql-b",
        known=lambda: client.connector_state("sql-b").documents,
    )
    assert Syncer(client, conn).run().pushed == 3
    execute(source_db, "DELETE FROM articles WHERE id = 3")  # gone without a tombstone
    execute(source_db, "UPDATE articles SET readers = '{user:ann}' WHERE id = 2")
    report = Syncer(client, conn).run()
    assert (report.pushed, report.deleted, report.acl_updated, report.unchanged) == (0, 1, 1, 1)
    assert "3" not in ids(bob, "soup pasta fish")
    assert "2" not in ids(bob, "salary bands engineering ladder")


def test_killed_sync_resumes(live_tenant: LiveServer, source_db: str, tmp_path: Path) -> None:
    client = Client(live_tenant.url, live_tenant.key("ingest"))
    known = lambda: client.connector_state("sql-k").documents  # noqa: E731
    with pytest.raises(KeyboardInterrupt):
        Syncer(
            client, dies_after(SqlConnector(source_db, spec(tmp_path, JOINED), name="sql-k", known=known), 2)
        ).run()
    state = client.connector_state("sql-k")
    assert len(state.documents) == 2 and state.cursor is None
    report = Syncer(client, SqlConnector(source_db, spec(tmp_path, JOINED), name="sql-k", known=known)).run()
    assert (report.pushed, report.unchanged, report.failed) == (1, 2, 0)
    assert client.connector_state("sql-k").cursor is not None


def test_cli_connect_sql_json_and_bad_input(live_tenant: LiveServer, source_db: str, tmp_path: Path) -> None:
    (tmp_path / "q.toml").write_text(JOINED)
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAGLINE_API_URL": live_tenant.url}
    env["RAGLINE_API_KEY"] = live_tenant.key("ingest")
    cmd = [sys.executable, "-m", "cli.main", "connect", "sql"]
    opts = ["--query-file", str(tmp_path / "q.toml"), "--tenant", live_tenant.tenant, "--json"]

    def run(dsn: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*cmd, dsn, *opts], env=env, cwd=REPO, capture_output=True, text=True, timeout=180
        )

    first = run(source_db)
    assert first.returncode == 0, first.stderr[-2000:]
    summary = json.loads(first.stdout.strip().splitlines()[-1])
    assert (summary["pushed"], summary["failed"]) == (3, 0)
    second = json.loads(run(source_db).stdout.strip().splitlines()[-1])
    assert (second["pushed"], second["unchanged"]) == (0, 3)
    missing = run(make_conninfo(source_db, dbname="no_such_database"))
    assert missing.returncode == 2 and "source database" in missing.stderr
    (tmp_path / "q.toml").write_text('query = "SELECT 1"\nkey = "id"\ntext = ["body"]\n')
    bad = run(source_db)
    assert bad.returncode == 2 and "acl_column, acl_query or public" in bad.stderr

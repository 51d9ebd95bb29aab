"""Purge on delete: after the retention window a deleted document's and a superseded
version's text leaves every PostgreSQL table (heap and TOAST, once VACUUM FULL rewrote them),
the index files and the data directory; ``ragline purge`` does it at once, audited; a
cancelled job's payload is dropped; the server log never quotes row data."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from catalog import indexes
from catalog import jobs as jobs_repo
from cli.main import main
from core.settings import get_settings
from jobs.rebuild_job import rebuild
from services.maintenance import tick
from tests import factories
from tests.integration.api.conftest import make_key, push_and_wait

pytestmark = pytest.mark.integration

GONE = "quokkamarker7731"  # a deleted document's text, title and metadata
OLD = "wombatoldtext5521"  # a superseded version's text
QUEUED = "emuqueuedpayload3319"  # a cancelled job's payload
ERASED = "numbaterased8842"  # a document erased with ragline purge
MARKERS = (GONE, OLD, QUEUED, ERASED)


def _auth(t: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {t}"}


def _in_tables(conn: psycopg.Connection, marker: str) -> list[str]:
    """Every table (and column kind) still holding ``marker``, read through SQL."""
    found = []
    tables = conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        " AND table_type = 'BASE TABLE'"
    ).fetchall()
    for (table,) in tables:
        cols = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
            " AND table_name = %s AND data_type = 'bytea'",
            (table,),
        ).fetchall()
        checks = [f"t::text LIKE '%%{marker}%%'"]
        checks += [f"position(convert_to('{marker}', 'UTF8') in t.{c}) > 0" for (c,) in cols]
        row = conn.execute(f"SELECT count(*) FROM {table} t WHERE {' OR '.join(checks)}").fetchone()
        if row and row[0]:
            found.append(table)
    return found


def _on_disk(conn: psycopg.Connection, markers: tuple[str, ...]) -> dict[str, list[str]]:
    """Relation files (heap, TOAST, indexes) of this database holding any marker's bytes."""
    data_dir = Path(conn.execute("SHOW data_directory").fetchone()[0])  # type: ignore[index]
    oid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0]  # type: ignore[index]
    return _grep(data_dir / "base" / str(oid), markers)


def _grep(root: Path, markers: tuple[str, ...]) -> dict[str, list[str]]:
    hits: dict[str, list[str]] = {}
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for m in markers:
                if m.encode() in data:
                    hits.setdefault(m, []).append(str(path))
    return hits


@pytest.fixture
def cli_env(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("RAGLINE_DATABASE_URL", db_url)
    monkeypatch.setenv("RAGLINE_DATA_DIR", str(tmp_path))  # the app's data dir too
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_deleted_and_superseded_text_is_purged_everywhere(
    full_client: TestClient, db_url: str, tmp_path: Path, cli_env: None
) -> None:
    ingest = make_key(db_url, "acme", ["ingest"])
    reader = make_key(db_url, "acme", ["query"], principal="user:r")
    public = {"public": True}
    push_and_wait(
        full_client,
        ingest,
        [
            {
                "external_id": "gone",
                "title": f"title {GONE}",
                "text": f"The {GONE} memo about the north relay.",
                "metadata": {"note": GONE},
                "acl": public,
            },
            {"external_id": "edited", "text": f"Draft: {OLD} relay schedule.", "acl": public},
            {"external_id": "erase", "text": f"Personal file {ERASED} for the relay team.", "acl": public},
            {"external_id": "kept", "text": "The north relay keeps running.", "acl": public},
        ],
    )
    push_and_wait(
        full_client, ingest, [{"external_id": "edited", "text": "Final: relay schedule.", "acl": public}]
    )
    index_root = get_settings().index_dir
    config = factories.rebuild(index_root=index_root, n_shards=2)
    with psycopg.connect(db_url, autocommit=True) as conn:
        v1 = rebuild(db_url, config)
        with conn.transaction():
            indexes.swap_alias(conn, alias="live", version_id=v1)
        item = jobs_repo.NewItem(external_id="late", mime_type="text/plain", payload=f"{QUEUED}".encode())
        queued = jobs_repo.create_job(conn, tenant_id="acme", kind="ingest", items=[item])
        jobs_repo.request_cancel(conn, job_id=queued, tenant_id="acme")
    assert full_client.delete("/v1/documents/gone", headers=_auth(ingest)).status_code == 200
    with psycopg.connect(db_url, autocommit=True) as conn:  # hidden, not yet purged: the window is open
        assert _in_tables(conn, GONE) and _in_tables(conn, OLD) and _in_tables(conn, QUEUED)
        # Planner statistics sample rows (pg_statistic): autovacuum's ANALYZE may run at any
        # time, so run it here; --compact must leave no sample of purged text either.
        conn.execute("ANALYZE")
        conn.execute("CHECKPOINT")
        assert set(_on_disk(conn, MARKERS)) == set(MARKERS)  # the disk check can see them
    assert set(_grep(index_root, MARKERS)) == {
        GONE,
        ERASED,
    }  # and so can the index one (built after the edit)

    # ragline purge: an erasure request, now, audited; live is rebuilt without it
    assert main(["purge", "--tenant", "acme", "--external-id", "erase", "--json"]) == 0
    with psycopg.connect(db_url) as conn:
        assert _in_tables(conn, ERASED) == []
        entry = conn.execute(
            "SELECT actor, tenant_id, details FROM audit_log"
            " WHERE action = 'document.purge' AND target = 'erase'"
        ).fetchone()
    assert (
        entry is not None
        and entry[0].startswith("operator:")
        and entry[1] == "acme"
        and entry[2]["deleted_now"]
    )
    assert main(["purge", "--tenant", "acme", "--external-id", "never-was"]) == 2

    # the maintenance tick past the window (0 s here) purges the rest, rebuilds live, GCs
    policy = factories.policy(purge_after_seconds=0.0, gc_grace_seconds=0, upload_dir=tmp_path / "uploads")
    result = tick(db_url, config, policy)
    assert result.purged.versions >= 2 and result.purged.job_payloads == 1 and result.rebuilt is not None
    result = tick(db_url, config, policy)  # nothing left: the live version postdates the purge
    assert not result.purged.any and result.rebuilt is None
    with psycopg.connect(db_url, autocommit=True) as conn:
        live = indexes.resolve_alias(conn, alias="live")
        assert live is not None and live.version_id != v1
        assert conn.execute("SELECT previous_version FROM index_aliases").fetchone() == (None,)
        assert conn.execute("SELECT state FROM index_versions WHERE version_id = %s", (v1,)).fetchone() == (
            "deleted",
        )
        for m in MARKERS:
            assert _in_tables(conn, m) == [], m
    # ragline purge --compact rewrites the tables: dead tuples and their TOAST go with the rewrite
    assert main(["purge", "--tenant", "acme", "--external-id", "erase", "--compact", "--json"]) == 0
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert _on_disk(conn, MARKERS) == {}
    assert _grep(tmp_path, MARKERS) == {}  # the index files and the rest of the data dir
    # what was not deleted still answers, in its current version
    body = full_client.post(
        "/v1/retrieve", json={"query": "relay schedule", "mode": "lexical"}, headers=_auth(reader)
    ).json()
    assert {r["document_external_id"] for r in body["results"]} == {"edited", "kept"}


def test_the_server_log_quotes_no_row_data(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        settings: dict[str, str] = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN ('log_min_error_statement',"
                " 'log_error_verbosity', 'log_parameter_max_length_on_error')"
            ).fetchall()
        )
        data_dir = Path(conn.execute("SHOW data_directory").fetchone()[0])  # type: ignore[index]
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("INSERT INTO tenants (tenant_id) VALUES (%s)", ("bad tenant platypus4471!",))
    assert settings == {
        "log_min_error_statement": "panic",
        "log_error_verbosity": "terse",
        "log_parameter_max_length_on_error": "0",
    }
    log_file = data_dir.parent / "postgres.log"
    if not log_file.exists():
        pytest.skip("not the embedded cluster: its log is elsewhere")
    assert b"platypus4471" not in log_file.read_bytes()
    assert b"tenants_tenant_id_check" in log_file.read_bytes()  # the error itself is logged

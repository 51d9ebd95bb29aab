"""What an erasure guarantees on disk (issue 43): after ``ragline purge --compact`` and
``ragline index gc --grace-seconds 0`` no file under the data directory holds the document's
text or a query that found it: not PostgreSQL's data directory (tables, TOAST, indexes, the
planner statistics, ``pg_wal``) and its log, not an index version another alias pinned
(``eval``, an operator's alias), not the app's data dir (index folders, uploads). Without a
rebuild the purge says which aliases still hold it, and GC says why it keeps them."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from catalog import indexes
from cli.main import main
from core.settings import get_settings
from jobs.rebuild_job import rebuild
from tests import factories
from tests.integration.api.conftest import full_settings, make_key, push_and_wait, serving_client, swap_live
from tests.integration.api.test_purge import _grep, _in_tables, cli_env  # noqa: F401  (a fixture)

pytestmark = pytest.mark.integration

# Random per run, long, in no dictionary: found only where this test put it. Every value is
# far below PostgreSQL's TOAST threshold (2 kB), so rows are stored uncompressed and a raw
# byte scan sees them (the SQL checks cover the rows too). It ends in digits: the BM25
# tokenizer's Snowball stemmer would cut a final "e", "ed" or "es" off a random hex tail
# (1 run in ~15), and the index version would then hold a shorter token than the scan seeks.
MARKER = "erasuremarker" + secrets.token_hex(12) + "0"


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def audited_client(db_url: str, tmp_path: Path, embedder, cli_env: None) -> Iterator[TestClient]:  # noqa: F811
    """The whole API with the retrieve audit on and query text stored, on the CLI's data dir."""
    settings = full_settings(db_url, tmp_path, audit={"store_query_text": True})
    yield from serving_client(settings, embedder, audit=True)


def _pinned_setup(client: TestClient, db_url: str) -> str:
    """Push the document to erase and one to keep, build a version, point ``live``, ``eval``
    and an operator's alias at it; returns the version."""
    ingest = make_key(db_url, "acme", ["ingest"])
    public = {"public": True}
    push_and_wait(
        client,
        ingest,
        [
            {"external_id": "erase", "text": f"Personal file {MARKER} for the relay team.", "acl": public},
            {"external_id": "kept", "text": "The north relay keeps running.", "acl": public},
        ],
    )
    v1 = rebuild(db_url, factories.rebuild(index_root=get_settings().index_dir))
    assert swap_live(db_url, client, v1) == v1
    with psycopg.connect(db_url) as conn, conn.transaction():
        indexes.swap_alias(conn, alias="eval", version_id=v1)
        indexes.swap_alias(conn, alias="ops-pin", version_id=v1)
    return v1


def _pg_files(conn: psycopg.Connection) -> list[Path]:
    """PostgreSQL's data directory and, for the local cluster, its log (next to it)."""
    data_dir = Path(conn.execute("SHOW data_directory").fetchone()[0])  # type: ignore[index]
    if not (data_dir / "pg_wal").is_dir():
        pytest.skip("not a local cluster: its data directory is not readable here")
    return [data_dir, data_dir.parent / "postgres.log"]


def _scan(roots: list[Path]) -> list[str]:
    hits: list[str] = []
    for root in roots:
        if root.is_file():
            hits += [str(root)] if MARKER.encode() in root.read_bytes() else []
        elif root.is_dir():
            hits += _grep(root, (MARKER,)).get(MARKER, [])
    return hits


def test_an_erasure_leaves_no_byte_under_the_data_directory(
    audited_client: TestClient, db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = audited_client
    v1 = _pinned_setup(client, db_url)
    reader = make_key(db_url, "acme", ["query"], principal="user:r")
    answer = client.post(
        "/v1/retrieve", json={"query": f"{MARKER} relay", "mode": "lexical"}, headers=_auth(reader)
    ).json()
    chunks = {r["document_external_id"]: r["chunk_id"] for r in answer["results"]}
    assert set(chunks) == {"erase", "kept"}
    client.app.state.observer.audit.flush()  # type: ignore[attr-defined]
    for doc in ("erase", "kept"):  # feedback copies the search's query text
        r = client.post(
            "/v1/feedback",
            json={"request_id": answer["request_id"], "chunk_id": chunks[doc], "label": "relevant"},
            headers=_auth(reader),
        )
        assert r.status_code == 200 and r.json()["query_stored"], r.text
    with psycopg.connect(db_url, autocommit=True) as conn:
        pg_roots = _pg_files(conn)
        conn.execute("ANALYZE")  # the planner's samples quote rows (seen in pg_statistic)
        conn.execute("CHECKPOINT")
        in_stats = conn.execute(
            "SELECT count(*) FROM pg_statistic WHERE stavalues1::text LIKE %s OR stavalues2::text LIKE %s"
            " OR stavalues3::text LIKE %s",
            (f"%{MARKER}%",) * 3,
        ).fetchone()
    before = _scan([*pg_roots, tmp_path])
    assert in_stats is not None and in_stats[0] >= 1
    # The scan can see every place: tables, statistics, WAL, the index version.
    assert any("/pg_wal/" in h for h in before) and any("/base/" in h for h in before)
    assert any(h.startswith(str(tmp_path)) for h in before)

    capsys.readouterr()
    assert main(["purge", "--tenant", "acme", "--external-id", "erase", "--compact", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert main(["index", "gc", "--grace-seconds", "0"]) == 0

    assert _scan([*pg_roots, tmp_path]) == []
    moved = {p["alias"]: p for p in done["pinned"]}
    assert set(moved) == {"eval", "ops-pin"} and all(p["version"] == v1 for p in moved.values())
    assert moved["eval"]["serves"] == done["rebuilt"] == moved["ops-pin"]["serves"]
    assert done["compacted"] and done["statistics"] and done["wal"]
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert _in_tables(conn, MARKER) == []
        assert indexes.get_version(conn, version_id=v1).state == "deleted"  # type: ignore[union-attr]
        # The search's audit entry stays (who asked, what came back), without its text; the
        # erased document's judgement goes, the other keeps its grade without the text.
        entry = conn.execute(
            "SELECT details FROM audit_log WHERE action = 'retrieve' AND target = %s", (answer["request_id"],)
        ).fetchone()
        assert entry is not None and "query" not in entry[0] and chunks["erase"] in entry[0]["chunk_ids"]
        assert conn.execute("SELECT chunk_id, query FROM feedback").fetchall() == [(chunks["kept"], None)]
    # What was kept still answers, from the version the aliases moved to.
    body = client.post(
        "/v1/retrieve", json={"query": "relay", "mode": "lexical"}, headers=_auth(reader)
    ).json()
    assert {r["document_external_id"] for r in body["results"]} == {"kept"}


def test_without_a_rebuild_the_purge_and_gc_name_the_aliases_still_holding_it(
    audited_client: TestClient, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    v1 = _pinned_setup(audited_client, db_url)
    capsys.readouterr()
    assert main(["purge", "--tenant", "acme", "--external-id", "erase", "--no-rebuild"]) == 0
    out = capsys.readouterr().out
    for alias in ("eval", "live", "ops-pin"):
        assert f"alias {alias} still points at {v1}, which holds the document" in out
    assert main(["index", "gc", "--grace-seconds", "0"]) == 0
    kept = [line for line in capsys.readouterr().out.splitlines() if line.startswith(f"kept {v1}")]
    assert len(kept) == 1 and "alias eval" in kept[0] and "may hold purged text" in kept[0]

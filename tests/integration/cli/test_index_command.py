"""``ragline index`` maintenance commands say what they compared, kept and found, and
``make run`` never moves an alias an operator has set."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from catalog import indexes
from catalog.documents import delete_document
from cli.main import main
from cli.run import _build_index
from core.settings import get_settings

pytestmark = pytest.mark.integration


@pytest.fixture
def cli_env(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("RAGLINE_DATABASE_URL", db_url)
    monkeypatch.setenv("RAGLINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("RAGLINE_EMBEDDING_BACKEND", "torch")  # no ONNX export per test
    monkeypatch.setenv("RAGLINE_EMBEDDING_DEVICE", "cpu")
    get_settings.cache_clear()
    yield db_url
    get_settings.cache_clear()


def _ingest(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    docs = tmp_path / name
    docs.mkdir()
    for i in range(3):
        (docs / f"{name}{i}.md").write_text(f"# {name} {i}\n\nSome text about {name} number {i}.")
    assert main(["ingest", str(docs), "--tenant", "acme", "--public", "--no-ray"]) == 0
    capsys.readouterr()


def test_verify_with_no_version_has_nothing_to_verify(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["index", "verify"])
    out = capsys.readouterr().out
    assert code == 0
    assert "nothing to verify" in out and "live" in out


def test_rebuild_if_needed_gc_and_make_run_alias(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rebuild says what it compared, ``index capacity`` counts what ``index verify`` finds
    in the version (a deleted document's stored vectors in neither), gc keeps the aliased."""
    _ingest(tmp_path, "first", capsys)
    with psycopg.connect(cli_env) as conn:  # its vectors stay stored, but no version holds them
        gone = conn.execute("SELECT external_id FROM documents ORDER BY external_id LIMIT 1").fetchone()
        assert gone is not None
        delete_document(conn, tenant_id="acme", external_id=gone[0])
    assert main(["index", "rebuild", "--swap", "live"]) == 0
    capsys.readouterr()
    with psycopg.connect(cli_env) as conn:
        v1 = indexes.aliases(conn)["live"]
    # `index capacity` plans for the vectors `index verify` finds in a version built now.
    assert main(["index", "verify"]) == 0
    verified = json.loads(capsys.readouterr().out)
    assert main(["index", "capacity", "--json"]) == 0
    capacity = json.loads(capsys.readouterr().out)
    assert verified["ok"] and verified["index_rows"] == verified["live_rows"] == 2
    assert capacity["n_vectors"] == verified["index_rows"]

    code = main(["index", "rebuild", "--if-needed"])
    out = capsys.readouterr().out
    assert code == 0 and "no rebuild needed" in out
    assert "delta 0 chunks < 50000" in out and "shard 0 hidden 0.00 < 0.2" in out

    code = main(["index", "gc", "--grace-seconds", "0"])
    out = capsys.readouterr().out
    assert code == 0
    assert "deleted nothing" in out and f"kept {v1}: alias live" in out

    # An operator's alias stays where it is on the next start, even with fresh documents.
    _ingest(tmp_path, "second", capsys)
    _build_index(cli_env, get_settings())
    with psycopg.connect(cli_env) as conn:
        assert indexes.aliases(conn)["live"] == v1
        assert [v.version_id for v in indexes.list_versions(conn)] == [v1]

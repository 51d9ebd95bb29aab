"""``ragline index`` maintenance commands say what they compared, kept and found, and
``make run`` never moves an alias an operator has set."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from catalog import indexes
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
    _ingest(tmp_path, "first", capsys)
    assert main(["index", "rebuild", "--swap", "live"]) == 0
    capsys.readouterr()
    with psycopg.connect(cli_env) as conn:
        v1 = indexes.aliases(conn)["live"]

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

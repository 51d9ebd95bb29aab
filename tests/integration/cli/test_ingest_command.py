"""``ragline ingest`` validates what the API validates, reports what it skips, and its exit
codes tell success, partial failure and failure apart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from catalog import jobs as jobs_repo
from cli.main import main
from core.settings import get_settings

pytestmark = pytest.mark.integration


@pytest.fixture
def cli_env(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("RAGLINE_DATABASE_URL", db_url)
    monkeypatch.setenv("RAGLINE_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    yield db_url
    get_settings.cache_clear()


def _jobs(url: str) -> list[jobs_repo.JobRow]:
    with psycopg.connect(url) as conn:
        return jobs_repo.list_jobs(conn, tenant_id=None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--acl", "eng"], "ACL entry 'eng'"),
        (["--acl", "group: ops"], "ACL entry 'group: ops'"),
        (["--metadata", "source"], "metadata 'source' must be KEY=VALUE"),
        (["--metadata", "bad key=x"], "metadata key 'bad key'"),
    ],
)
def test_bad_acl_and_metadata_are_refused_before_any_job(
    argv: list[str], message: str, cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.md").write_text("# A\n\nalpha")
    code = main(["ingest", str(tmp_path / "a.md"), "--tenant", "acme", "--no-ray", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and "Traceback" not in err
    assert _jobs(cli_env) == []


def test_skipped_files_are_named(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], embedder: object
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "keep.md").write_text("# Keep\n\nkept text")
    (docs / "archive.zip").write_bytes(b"PK\x03\x04....")
    (docs / "legacy.doc").write_bytes(b"\xd0\xcf\x11\xe0....")
    code = main(["ingest", str(docs), "--tenant", "acme", "--no-ray", "--public"])
    err = capsys.readouterr().err
    assert code == 0
    assert "skipped 2 files with an unsupported type" in err
    assert "archive.zip" in err and "legacy.doc" in err


def test_partially_failed_has_its_own_exit_code(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], embedder: object
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "good.md").write_text("# Good\n\nfine text")
    (docs / "empty.txt").write_text("   \n")
    code = main(["ingest", str(docs), "--tenant", "acme", "--no-ray", "--public"])
    out = capsys.readouterr().out
    assert "partially_failed" in out
    assert code == 3

"""``ragline ingest`` reads a folder of Office and OpenDocument files, spreadsheets and scans
by suffix."""

from __future__ import annotations

import shutil
from pathlib import Path

import psycopg
import pytest

from catalog import jobs as jobs_repo
from cli.main import main
from tests.unit.ingest import office_factory

pytestmark = pytest.mark.integration


def test_a_folder_of_office_files_is_ingested(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], embedder: object
) -> None:
    docs = tmp_path / "share"
    docs.mkdir()
    (docs / "handbook.docx").write_bytes(office_factory.docx_bytes())
    (docs / "deck.pptx").write_bytes(office_factory.pptx_bytes())
    (docs / "servers.xlsx").write_bytes(office_factory.xlsx_bytes())
    (docs / "cities.csv").write_bytes(office_factory.csv_bytes())
    (docs / "notes.odt").write_bytes(office_factory.odt_bytes())
    (docs / "talk.odp").write_bytes(office_factory.odp_bytes())
    (docs / "budget.ods").write_bytes(office_factory.ods_bytes())
    (docs / "legacy.doc").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(512))
    expected = {
        "handbook.docx",
        "deck.pptx",
        "servers.xlsx",
        "cities.csv",
        "notes.odt",
        "talk.odp",
        "budget.ods",
    }
    if shutil.which("tesseract"):
        (docs / "scan.png").write_bytes(office_factory.png_bytes(["A scanned receipt."]))
        expected.add("scan.png")
    code = main(["ingest", str(docs), "--tenant", "acme", "--no-ray", "--public"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "skipped 1 files" in err and "legacy.doc" in err
    with psycopg.connect(cli_env) as conn:
        (job,) = jobs_repo.list_jobs(conn, tenant_id=None)
        assert job.state == "succeeded"
        ids = {row[0] for row in conn.execute("SELECT external_id FROM documents WHERE tenant_id = 'acme'")}
    assert ids == expected

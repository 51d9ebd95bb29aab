"""``ragline ingest`` of a folder with an ``.eml``: its attachments become documents of their own."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from cli.main import main
from tests.unit.ingest import office_factory

pytestmark = pytest.mark.integration


def test_an_ingested_message_gets_its_attachment_documents(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], embedder: object
) -> None:
    docs = tmp_path / "mail"
    docs.mkdir()
    (docs / "audit.eml").write_bytes(office_factory.eml_bytes())  # a DOCX, a CSV and a ZIP attached
    code = main(["ingest", str(docs), "--tenant", "acme", "--no-ray", "--public"])
    assert code == 0, capsys.readouterr().err
    with psycopg.connect(cli_env) as conn:
        rows = conn.execute(
            "SELECT d.external_id, d.title, d.metadata->>'parent_external_id', d.acl_public,"
            " p.external_id FROM documents d LEFT JOIN documents p ON p.doc_id = d.parent_doc_id"
            " WHERE d.tenant_id = 'acme' AND d.state = 'active' ORDER BY d.external_id"
        ).fetchall()
    assert rows == [
        ("audit.eml", "Quarterly audit results", None, True, None),
        ("audit.eml#attachment=1", "handbook.docx", "audit.eml", True, "audit.eml"),
        ("audit.eml#attachment=2", "cities.csv", "audit.eml", True, "audit.eml"),
    ]

"""Migration 010's backfill: a document exactly one connector's sync state records becomes
that connector's; one that two connectors record (the overlapping-paths defect) stays
unowned, so neither connector may delete it; one no connector records stays unowned."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

pytestmark = pytest.mark.integration

MIGRATION = Path(__file__).resolve().parents[3] / "catalog/migrations/010_document_connector.sql"


def test_backfill_records_the_one_connector_that_synced_a_document(conn: psycopg.Connection) -> None:
    conn.execute("INSERT INTO tenants (tenant_id) VALUES ('acme'), ('globex')")
    for tenant, ext in (
        ("acme", "only-a.txt"),
        ("acme", "readme.txt"),
        ("acme", "manual.txt"),
        ("globex", "only-a.txt"),
    ):
        conn.execute(
            "INSERT INTO documents (tenant_id, external_id, mime_type) VALUES (%s, %s, 'text/plain')",
            (tenant, ext),
        )
    for tenant, connector, keys in (
        ("acme", "fs-a", ["only-a.txt", "readme.txt"]),
        ("acme", "fs-b", ["readme.txt"]),
        ("globex", "fs-g", ["only-a.txt"]),
    ):
        conn.execute(
            "INSERT INTO connector_state (tenant_id, connector) VALUES (%s, %s)", (tenant, connector)
        )
        for key in keys:
            conn.execute(
                "INSERT INTO connector_items (tenant_id, connector, kind, item_key, fingerprint)"
                " VALUES (%s, %s, 'document', %s, 'sha256:x')",
                (tenant, connector, key),
            )
    backfill = "UPDATE documents" + MIGRATION.read_text().split("UPDATE documents", 1)[1]
    conn.execute(backfill.encode())
    rows = conn.execute("SELECT tenant_id, external_id, connector FROM documents ORDER BY 1, 2").fetchall()
    assert rows == [
        ("acme", "manual.txt", None),
        ("acme", "only-a.txt", "fs-a"),
        ("acme", "readme.txt", None),
        ("globex", "only-a.txt", "fs-g"),
    ]

"""``ragline index verify``: files against the manifest, counts against the catalog."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import psycopg

from catalog.indexes import VersionRow
from core.errors import IndexIntegrityError
from index.manifest import verify_version


@dataclass(frozen=True, slots=True)
class Reconciliation:
    version_id: str
    files_ok: bool
    file_error: str | None
    index_rows: int
    unknown_rows: int  # in the index, absent from the catalog: never expected
    hidden_rows: int  # deleted or superseded since the build: masked at query time
    live_rows: int
    missing_live: int  # visible before the build position but absent from the index: never expected
    fresh_after_build: int  # visible chunks written after the build: served from the delta

    @property
    def ok(self) -> bool:
        return self.files_ok and self.unknown_rows == 0 and self.missing_live == 0

    def as_json(self) -> dict[str, object]:
        return {**asdict(self), "ok": self.ok}


def reconcile(conn: psycopg.Connection, target: VersionRow) -> Reconciliation:
    path = Path(target.path)
    try:
        manifest = verify_version(path)
        files_ok, error = True, None
        rows = np.concatenate([np.load(path / s.path / "row_ids.npy") for s in manifest.shards])
    except IndexIntegrityError as exc:
        files_ok, error, rows = False, exc.message, np.zeros(0, np.int64)
    row = conn.execute(
        "WITH idx AS (SELECT unnest(%s::bigint[]) AS r)"
        " SELECT count(*) FILTER (WHERE c.chunk_row IS NULL),"
        " count(*) FILTER (WHERE c.chunk_row IS NOT NULL"
        "   AND (d.state <> 'active' OR d.current_version <> c.version)),"
        " count(*) FILTER (WHERE d.state = 'active' AND d.current_version = c.version)"
        " FROM idx LEFT JOIN chunks c ON c.chunk_row = idx.r LEFT JOIN documents d ON d.doc_id = c.doc_id",
        (rows.tolist(),),
    ).fetchone()
    unknown, hidden, live = (int(x) for x in row) if row else (0, 0, 0)
    outside = conn.execute(
        "SELECT count(*) FILTER (WHERE NOT changed), count(*) FILTER (WHERE changed) FROM ("
        " SELECT c.chunk_row, EXISTS (SELECT 1 FROM catalog_changes x WHERE x.doc_id = c.doc_id"
        "   AND x.kind = 'version' AND x.seq > %s) AS changed"
        " FROM chunks c JOIN documents d ON d.doc_id = c.doc_id AND d.current_version = c.version"
        " AND d.state = 'active' WHERE c.level = 0 AND NOT (c.chunk_row = ANY(%s))) s",
        (target.catalog_position, rows.tolist()),
    ).fetchone()
    missing, fresh = (int(x) for x in outside) if outside else (0, 0)
    return Reconciliation(
        target.version_id, files_ok, error, len(rows), unknown, hidden, live, missing, fresh
    )

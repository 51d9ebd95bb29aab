"""``ragline index verify``: files against the manifest, counts against the catalog."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import psycopg

from catalog import maintenance as maintenance_repo
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
    inside = maintenance_repo.indexed_row_counts(conn, rows=rows.tolist())
    outside = maintenance_repo.outside_row_counts(conn, rows=rows.tolist(), position=target.catalog_position)
    return Reconciliation(
        version_id=target.version_id,
        files_ok=files_ok,
        file_error=error,
        index_rows=len(rows),
        unknown_rows=inside.unknown,
        hidden_rows=inside.hidden,
        live_rows=inside.live,
        missing_live=outside.missing,
        fresh_after_build=outside.fresh,
    )

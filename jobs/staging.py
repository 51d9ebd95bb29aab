"""Staged uploads (``<data_dir>/uploads``): removed when their item ends, orphans collected.

Only files under the upload directory are ever removed: a CLI-ingested item's
``payload_path`` is the user's own file.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import psycopg

from catalog import jobs as jobs_repo

log = logging.getLogger(__name__)


def _inside(path: Path, upload_dir: Path) -> bool:
    return path.resolve().parent == upload_dir.resolve()


def remove_finished(
    conn: psycopg.Connection, *, job_id: uuid.UUID, item_nos: Sequence[int], upload_dir: Path | None
) -> int:
    """Delete the staged files of these items once committed or failed; returns how many."""
    if upload_dir is None or not item_nos:
        return 0
    return remove_staged(jobs_repo.finished_payload_paths(conn, job_id=job_id, item_nos=item_nos), upload_dir)


def remove_staged(paths: Sequence[str], upload_dir: Path | None) -> int:
    """Delete those of ``paths`` that are staged uploads (an erasure's, a finished item's);
    returns how many were."""
    if upload_dir is None:
        return 0
    removed = 0
    for name in paths:
        path = Path(name)
        if _inside(path, upload_dir):
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def collect_orphan_uploads(conn: psycopg.Connection, *, upload_dir: Path, grace_seconds: float) -> list[str]:
    """Delete staged files no queued or running job still needs, older than ``grace_seconds``
    (an upload being staged right now has no job row yet). Returns the names removed."""
    if not upload_dir.is_dir():
        return []
    live = {Path(p).resolve() for p in jobs_repo.live_payload_paths(conn)}
    cutoff = time.time() - grace_seconds
    removed = []
    for path in sorted(upload_dir.iterdir()):
        try:
            if path.is_file() and path.resolve() not in live and path.stat().st_mtime < cutoff:
                path.unlink()
                removed.append(path.name)
        except FileNotFoundError:  # removed meanwhile by its job
            continue
    if removed:
        log.info("removed %d orphaned uploads from %s", len(removed), upload_dir)
    return removed

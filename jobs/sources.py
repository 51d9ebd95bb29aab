"""Loading a job item's bytes back as a ``SourceDocument``."""

from __future__ import annotations

from pathlib import Path

import psycopg

from catalog import jobs as jobs_repo
from catalog.jobs import ItemRow
from core.errors import ParseError
from core.records import SourceDocument
from ragline_client.paths import OutsideRootError, open_unlinked


def load_source(conn: psycopg.Connection, *, tenant_id: str, item: ItemRow) -> SourceDocument:
    """The item's document; a missing staged file is a per-item error, not a crash.

    Bytes kept in the catalog win over the path: the Ray path stages every file there first
    (``stage_paths``), so a cluster node never needs the submitting machine's disk.
    """
    content = jobs_repo.item_payload(conn, job_id=item.job_id, item_no=item.item_no)
    if content is None and item.payload_path is not None:
        content = read_path(Path(item.payload_path))
    return SourceDocument(
        tenant_id=tenant_id,
        external_id=item.external_id,
        mime_type=item.mime_type,
        content=content or b"",
        title=item.title,
        metadata=dict(item.metadata),
        acl=item.acl,
        connector=item.connector,
    )


def read_path(path: Path) -> bytes:
    """A staged or listed file: ``ragline ingest`` and uploads record ``resolve()``'s path, so
    a symbolic link found in it now was put there since, and is refused, not followed."""
    try:
        with open_unlinked(path) as f:
            return f.read()
    except OutsideRootError as exc:
        raise ParseError(f"refused {path.name}: {exc.strerror}", code="outside_source") from exc
    except OSError as exc:
        raise ParseError(f"cannot read {path.name}: {exc.strerror}", code="source_unreadable") from exc

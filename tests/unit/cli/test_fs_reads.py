"""The fs connector reads each file through ``open_beneath`` at listing and at load time: a
file over the inline limit goes to the upload as a copy made from the checked descriptor,
and a file swapped for a link after the listing fails its load instead of being read."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.connect import INLINE_MAX_BYTES, AclMap, FsConnector
from ragline_client import FileDocument
from ragline_client.paths import OutsideRootError

MARKER = b"OUTSIDE-THE-ROOT-e41b"


def test_a_large_file_is_uploaded_from_a_copy_of_the_checked_file(tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_bytes(MARKER * 10)
    root = tmp_path / "share"
    root.mkdir()
    big = b"large text " * (INLINE_MAX_BYTES // 10)
    (root / "big.txt").write_bytes(big)
    connector = FsConnector(root, name="fs-big", acl_map=AclMap({"*": {"public": True}}))
    [item] = connector.list_items(None).items
    doc = connector.load(item)
    assert isinstance(doc, FileDocument) and doc.path != root / "big.txt"
    # The original swapped for a link now: the copy the upload opens is still the checked file.
    (root / "big.txt").unlink()
    (root / "big.txt").symlink_to(tmp_path / "outside.txt")
    assert doc.path.read_bytes() == big
    with pytest.raises(OutsideRootError):
        connector.load(item)
    connector.close()
    assert not doc.path.exists()

"""``ragline_client.paths``: below its root a source follows no symbolic link and takes no
``..``; reads check the file they open, so a link put in after the listing is refused too.
Real files and real symlinks in ``tmp_path``; outside each root sits a file with a marker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.errors import ParseError
from jobs.sources import read_path
from ragline_client.paths import OutsideRootError, open_beneath, open_unlinked, plain_parts

MARKER = "OUTSIDE-THE-ROOT-7f3a"


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    """``root/`` with a plain file, links out and in, and ``outside/secret.txt`` beside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(MARKER)
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "plain.txt").write_text("plain text")
    (root / "out.txt").symlink_to(outside / "secret.txt")
    (root / "in.txt").symlink_to(root / "sub" / "plain.txt")
    (root / "dangling.txt").symlink_to(tmp_path / "nowhere.txt")
    (root / "outdir").symlink_to(outside, target_is_directory=True)
    return root


def test_a_plain_file_is_read(layout: Path) -> None:
    with open_beneath(layout, "sub/plain.txt") as f:
        assert f.read() == b"plain text"


@pytest.mark.parametrize(
    "rel",
    ["out.txt", "in.txt", "dangling.txt", "outdir/secret.txt", "sub/../out.txt", "../outside/secret.txt"],
)
def test_no_link_and_no_dotdot_is_followed(layout: Path, rel: str) -> None:
    with pytest.raises(OutsideRootError):
        open_beneath(layout, rel)


@pytest.mark.parametrize("rel", ["", "/etc/passwd", "a//b.md", "./a.md", "a/./b.md", "..", "a/..", "a\0b"])
def test_only_plain_relative_paths_pass(rel: str) -> None:
    with pytest.raises(OutsideRootError):
        plain_parts(rel)


def test_a_fifo_is_refused_without_blocking(layout: Path) -> None:
    os.mkfifo(layout / "pipe.txt")
    with pytest.raises(OutsideRootError, match="not a regular file"):
        open_beneath(layout, "pipe.txt")


def test_a_folder_swapped_for_a_link_after_the_walk_is_refused(layout: Path, tmp_path: Path) -> None:
    listed = (layout / "sub" / "plain.txt").resolve()
    (layout / "sub").rename(tmp_path / "moved")
    (layout / "sub").symlink_to(tmp_path / "outside", target_is_directory=True)
    (tmp_path / "outside" / "plain.txt").write_text(MARKER)
    with pytest.raises(OutsideRootError):
        open_beneath(layout, "sub/plain.txt")
    with pytest.raises(OutsideRootError):
        open_unlinked(listed)
    # The job's read of a path ``ragline ingest`` recorded fails its item, reading nothing.
    with pytest.raises(ParseError) as refused:
        read_path(listed)
    assert refused.value.code == "outside_source" and MARKER not in refused.value.message


def test_a_file_swapped_for_a_link_is_refused_by_the_job_read(layout: Path) -> None:
    listed = (layout / "sub" / "plain.txt").resolve()
    assert read_path(listed) == b"plain text"
    listed.unlink()
    listed.symlink_to(layout.parent / "outside" / "secret.txt")
    with pytest.raises(ParseError) as refused:
        read_path(listed)
    assert refused.value.code == "outside_source"

"""Which files a bulk connector takes from a folder (``ingest.files.walk``): hidden files and
dot-folders are left out unless an include glob names them, include and exclude globs use
gitignore syntax, and every file passed over is accounted for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.errors import InvalidInputError
from ingest.files import FileFilter, walk


def _tree(root: Path, *rels: str) -> Path:
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    return root


def _ids(found: list[tuple[Path, str]]) -> list[str]:
    return [rel for _, rel in found]


def test_hidden_files_and_dot_folders_are_skipped(tmp_path: Path) -> None:
    root = _tree(
        tmp_path, "a.md", ".env.txt", ".hidden.md", ".git/HEAD.txt", "x/.cache/p.html", "x/b.txt", "c.exe"
    )
    walked = walk([root])
    assert _ids(walked.found) == ["a.md", "x/b.txt"]
    assert sorted(p.relative_to(root).as_posix() for p in walked.hidden) == [
        ".env.txt",
        ".git",
        ".hidden.md",
        "x/.cache",
    ]
    assert walked.skipped() == {"hidden": 4, "excluded": 0, "unsupported": 1, "symlinks": 0}


def test_include_exclude_and_naming_a_dot_component(tmp_path: Path) -> None:
    root = _tree(tmp_path, "a.md", "b.txt", "drafts/c.md", ".hidden.md", ".notes/d.md", ".notes/e.txt")
    only_md = walk([root], FileFilter(include=("*.md",)))
    assert _ids(only_md.found) == ["a.md", "drafts/c.md"]  # *.md does not unhide .hidden.md
    dotted = walk([root], FileFilter(include=("*.md", ".notes/*.md"), exclude=("drafts/",)))
    assert _ids(dotted.found) == [".notes/d.md", "a.md"]
    assert sorted(p.name for p in dotted.excluded) == ["b.txt", "c.md"]
    assert sorted(p.name for p in dotted.hidden) == [".hidden.md", "e.txt"]
    negated = walk([root], FileFilter(exclude=("*.md", "!a.md")))
    assert _ids(negated.found) == ["a.md", "b.txt"]


def test_a_file_named_directly_is_always_taken(tmp_path: Path) -> None:
    root = _tree(tmp_path, ".secret.md")
    assert _ids(walk([root / ".secret.md"]).found) == [".secret.md"]


def test_symlinked_folders_are_not_followed(tmp_path: Path) -> None:
    root = _tree(tmp_path / "r", "a.md")
    os.symlink(root, root / "loop")
    assert _ids(walk([root]).found) == ["a.md"]


def test_an_invalid_glob_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="invalid glob"):
        FileFilter(include=("[z-a]",))


def test_no_symlink_below_the_folder_is_taken_and_each_is_listed(tmp_path: Path) -> None:
    outside = _tree(tmp_path / "outside", "secret.md", "keys/id.txt")
    root = _tree(tmp_path / "r", "a.md", "sub/b.md")
    os.symlink(outside / "secret.md", root / "leak.md")  # a file outside
    os.symlink(root / "a.md", root / "sub" / "again.md")  # a file inside: its own path is taken
    os.symlink(tmp_path / "nowhere.md", root / "dangling.md")
    os.symlink(outside / "keys", root / "keys")  # a folder outside
    walked = walk([root])
    assert _ids(walked.found) == ["a.md", "sub/b.md"]
    assert sorted(p.relative_to(root).as_posix() for p in walked.links) == [
        "dangling.md",
        "keys",
        "leak.md",
        "sub/again.md",
    ]
    assert walked.skipped()["symlinks"] == 4


def test_a_link_named_directly_is_skipped_but_a_linked_folder_is_a_root(tmp_path: Path) -> None:
    outside = _tree(tmp_path / "outside", "secret.md")
    share = _tree(tmp_path / "share", "a.md")
    os.symlink(outside / "secret.md", share / "leak.md")
    # ``ragline ingest share/*``: the shell names the link itself.
    walked = walk(sorted(share.iterdir()))
    assert _ids(walked.found) == ["a.md"] and walked.links == [share / "leak.md"]
    os.symlink(share, tmp_path / "alias")  # the operator's own link to the folder: the root
    assert _ids(walk([tmp_path / "alias"]).found) == ["a.md"]

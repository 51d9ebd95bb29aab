"""Files a bulk connector ingests: which suffixes it reads, which files under a folder it
takes (no hidden ones unless asked, ``--include``/``--exclude`` globs), and the id each gets."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pathspec

from core.errors import InvalidInputError

MIME_BY_SUFFIX = {
    ".pdf": "application/pdf",
    ".html": "text/html",
    ".htm": "text/html",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".txt": "text/plain",
    ".text": "text/plain",
    ".rst": "text/plain",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ".csv": "text/csv",
    ".odt": "application/vnd.oasis.opendocument.text",
    ".odp": "application/vnd.oasis.opendocument.presentation",
    ".ods": "application/vnd.oasis.opendocument.spreadsheet",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".tif": "image/tiff",
    ".tiff": "image/tiff",
    ".epub": "application/epub+zip",
    ".eml": "message/rfc822",
}


@dataclass(frozen=True, slots=True)
class FileFilter:
    """Which files under a folder are taken. Globs use gitignore syntax (``*.md``,
    ``drafts/``, ``docs/**/*.txt``) against the path relative to the folder.

    Dotfiles and anything under a dot-folder (``.env.txt``, ``.git/``) are left out: they
    are configuration and secrets far more often than documents, and a folder given with
    ``--public`` would make them readable tenant-wide. An ``include`` glob that itself names
    a dot component (``.notes/**``, ``.*.md``) takes the hidden files it matches. With any
    ``include`` glob, only files some glob matches are taken; ``exclude`` wins over both.
    """

    include: Sequence[str] = ()
    exclude: Sequence[str] = ()

    def __post_init__(self) -> None:
        for pattern in (*self.include, *self.exclude):
            _spec([pattern])  # an invalid glob fails here, before any file is read


@dataclass(frozen=True, slots=True)
class Walked:
    """What ``walk`` found: the files to take with their ids, and those it passed over."""

    found: list[tuple[Path, str]] = field(default_factory=list)
    unsupported: list[Path] = field(default_factory=list)  # a type the server does not parse
    hidden: list[Path] = field(default_factory=list)  # dotfiles, and dot-folders not entered
    excluded: list[Path] = field(default_factory=list)  # an --exclude glob, or no --include glob
    links: list[Path] = field(default_factory=list)  # symbolic links, never followed (ragline_client.paths)

    def skipped(self) -> dict[str, int]:
        return {
            "hidden": len(self.hidden),
            "excluded": len(self.excluded),
            "unsupported": len(self.unsupported),
            "symlinks": len(self.links),
        }


_DOT_COMPONENT = re.compile(r"(^|/)\.[^/]")


def _spec(patterns: Sequence[str]) -> pathspec.GitIgnoreSpec | None:
    if not patterns:
        return None
    try:
        return pathspec.GitIgnoreSpec.from_lines(patterns)
    except (ValueError, TypeError, re.error) as exc:
        raise InvalidInputError(f"invalid glob in {list(patterns)}: {exc}") from exc


def _hidden(rel: str) -> bool:
    return any(part.startswith(".") for part in PurePosixPath(rel).parts)


def walk(paths: Sequence[Path], selection: FileFilter | None = None) -> Walked:
    """Files under ``paths`` that ``selection`` takes and that have a supported suffix, with
    the id each gets (its path relative to the folder), and what was passed over and why. A
    file named directly is always taken unless it is a symbolic link. Below a folder named
    (which may itself be a link), no symbolic link is followed, to a file or a folder: each is
    listed in ``links`` (``ragline_client.paths`` says why), and the reader opens what was
    found with ``open_beneath``, so a link put in after the walk is refused too."""
    selection = selection or FileFilter()
    include, exclude = _spec(selection.include), _spec(selection.exclude)
    dot_include = _spec([p for p in selection.include if _DOT_COMPONENT.search(p)])
    out = Walked()
    for root in paths:
        if root.is_symlink() and not root.is_dir():
            out.links.append(root)  # a shell glob over a share names its links too
            continue
        if root.is_file():
            out.found.append((root, root.name))
            continue
        taken: list[tuple[Path, str]] = []
        for dirpath, dirnames, filenames in os.walk(root):
            base = Path(dirpath)
            # os.walk lists a linked folder in dirnames but never enters it (followlinks=False).
            out.links.extend(base / d for d in sorted(dirnames) if (base / d).is_symlink())
            dirnames[:] = [d for d in dirnames if not (base / d).is_symlink()]
            if dot_include is None:  # nothing can take a hidden file: do not even look inside
                out.hidden.extend(base / d for d in sorted(dirnames) if d.startswith("."))
                dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in sorted(filenames):
                file = base / name
                rel = file.relative_to(root).as_posix()
                if file.is_symlink():
                    out.links.append(file)
                    continue
                if not file.is_file():
                    continue  # a socket, a FIFO
                if _hidden(rel) and (dot_include is None or not dot_include.match_file(rel)):
                    out.hidden.append(file)
                elif (include is not None and not include.match_file(rel)) or (
                    exclude is not None and exclude.match_file(rel)
                ):
                    out.excluded.append(file)
                elif file.suffix.lower() in MIME_BY_SUFFIX:
                    taken.append((file, rel))
                else:
                    out.unsupported.append(file)
        out.found.extend(sorted(taken, key=lambda f: PurePosixPath(f[1]).parts))
    return out

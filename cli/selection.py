"""The file-selection flags ``ragline ingest`` and ``ragline connect fs`` share, and how both
report what they passed over."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from ingest.files import MIME_BY_SUFFIX, FileFilter, Walked

SHOWN = 10  # names listed per kind of skipped file; the count covers the rest


def add_file_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="GLOB",
        help="take only files matching a glob (gitignore syntax, relative to the folder; repeatable);"
        " hidden files and dot-folders are skipped unless a glob names them (.notes/**)",
    )
    parser.add_argument(
        "--exclude", action="append", default=[], metavar="GLOB", help="leave out files matching a glob"
    )


def file_filter(args: argparse.Namespace) -> FileFilter:
    # Callers that build their own Namespace (``make run``'s sample ingest) may leave both out.
    return FileFilter(
        include=tuple(getattr(args, "include", ())), exclude=tuple(getattr(args, "exclude", ()))
    )


def _names(paths: Sequence[Path], roots: Sequence[Path]) -> str:
    def name(path: Path) -> str:
        for root in roots:
            if path != root and path.is_relative_to(root):
                rel = path.relative_to(root).as_posix()
                return rel + "/" if path.is_dir() else rel
        return str(path)

    return name_list([name(p) for p in paths])


def name_list(names: Sequence[str]) -> str:
    """The first ``SHOWN`` names, and how many more."""
    shown = ", ".join(names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def skipped_lines(walked: Walked, roots: Sequence[Path]) -> list[str]:
    """One line per kind of file passed over, naming them (the first ``SHOWN``)."""
    lines = []
    if walked.hidden:
        lines.append(
            f"skipped {len(walked.hidden)} hidden files and folders (--include '.name' to take them):"
            f" {_names(walked.hidden, roots)}"
        )
    if walked.excluded:
        lines.append(
            f"skipped {len(walked.excluded)} files by --include/--exclude: {_names(walked.excluded, roots)}"
        )
    if walked.unsupported:
        lines.append(
            f"skipped {len(walked.unsupported)} files with an unsupported type"
            f" (supported: {' '.join(sorted(MIME_BY_SUFFIX))}): {_names(walked.unsupported, roots)}"
        )
    if walked.links:
        lines.append(
            f"skipped {len(walked.links)} symbolic links (never followed: only files inside the folder"
            f" are read): {_names(walked.links, roots)}"
        )
    return lines

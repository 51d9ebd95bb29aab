"""Files a bulk connector ingests: which suffixes it reads and the id each file gets."""

from __future__ import annotations

from pathlib import Path

MIME_BY_SUFFIX = {
    ".pdf": "application/pdf",
    ".html": "text/html",
    ".htm": "text/html",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".txt": "text/plain",
    ".text": "text/plain",
    ".rst": "text/plain",
}


def walk(paths: list[Path]) -> list[tuple[Path, str]]:
    """Files under ``paths`` with a supported suffix, and the id each gets (its relative path)."""
    found: list[tuple[Path, str]] = []
    for root in paths:
        if root.is_file():
            found.append((root, root.name))
            continue
        for file in sorted(p for p in root.rglob("*") if p.is_file()):
            if file.suffix.lower() in MIME_BY_SUFFIX:
                found.append((file, file.relative_to(root).as_posix()))
    return found

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
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ".csv": "text/csv",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".tif": "image/tiff",
    ".tiff": "image/tiff",
    ".epub": "application/epub+zip",
    ".eml": "message/rfc822",
}


def walk(paths: list[Path]) -> tuple[list[tuple[Path, str]], list[Path]]:
    """Files under ``paths`` with a supported suffix and the id each gets (its relative path),
    and the files passed over for their type. A file named directly is always taken."""
    found: list[tuple[Path, str]] = []
    skipped: list[Path] = []
    for root in paths:
        if root.is_file():
            found.append((root, root.name))
            continue
        for file in sorted(p for p in root.rglob("*") if p.is_file()):
            if file.suffix.lower() in MIME_BY_SUFFIX:
                found.append((file, file.relative_to(root).as_posix()))
            else:
                skipped.append(file)
    return found, skipped

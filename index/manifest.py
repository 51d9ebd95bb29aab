"""Index versions on disk and their manifests.

A version is a folder ``<root>/<version_id>/`` holding ``shard-0000/``, ``shard-0001/``, ...
(dense files plus a ``lexical/`` subfolder each) and ``manifest.json``. It is built in
``<root>/.tmp-<version_id>-<random>/``; every file and folder is fsynced, the manifest is
written last, and only then is the folder renamed into place and the root fsynced. A crash
at any point leaves either no version or a complete one; leftover ``.tmp-*`` folders are
never listed as versions. ``verify_version`` re-hashes every file before a version serves.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import ConflictError, IndexIntegrityError, InvalidInputError
from index.faiss_shards import DenseParams
from index.tokenize import Tokenizer

FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
TMP_PREFIX = ".tmp-"
_VERSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file of a version: path relative to the version folder, size and sha256."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class ShardEntry:
    """One shard of a version; ``files`` is filled in by ``write_version``."""

    path: str
    n_vectors: int
    kind: str
    requested_kind: str
    fallback_reason: str | None
    dense_params: DenseParams
    files: tuple[FileEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class VersionContents:
    """What a build function reports about the shards it wrote."""

    model_name: str
    dim: int
    catalog_position: int
    tokenizer: Tokenizer
    shards: tuple[ShardEntry, ...]


@dataclass(frozen=True, slots=True)
class Manifest:
    format_version: int
    version_id: str
    model_name: str
    dim: int
    catalog_position: int
    chunk_count: int
    build_seconds: float
    created_at: str
    tokenizer: Tokenizer
    shards: tuple[ShardEntry, ...]


def write_version(root: Path, version_id: str, build: Callable[[Path], VersionContents]) -> Path:
    """Build a version in a temporary folder and publish it atomically.

    Args:
        root: folder holding all versions.
        version_id: name of the new version (letters, digits, ``._-``).
        build: writes the shard folders into the folder it is given and describes them.

    Returns:
        The published version folder ``root / version_id``.

    Raises:
        InvalidInputError: bad version id.
        ConflictError: the version already exists.
    """
    if not _VERSION_ID.match(version_id):
        raise InvalidInputError(f"invalid index version id {version_id!r}")
    final = root / version_id
    if final.exists():
        raise ConflictError(f"index version {version_id} already exists at {final}")
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f"{TMP_PREFIX}{version_id}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        started = time.monotonic()
        contents = build(tmp)
        build_seconds = time.monotonic() - started
        shards = tuple(replace(s, files=_describe_files(tmp, tmp / s.path)) for s in contents.shards)
        manifest = Manifest(
            format_version=FORMAT_VERSION,
            version_id=version_id,
            model_name=contents.model_name,
            dim=contents.dim,
            catalog_position=contents.catalog_position,
            chunk_count=sum(s.n_vectors for s in shards),
            build_seconds=round(build_seconds, 3),
            created_at=datetime.now(UTC).isoformat(),
            tokenizer=contents.tokenizer,
            shards=shards,
        )
        _write_synced(tmp / MANIFEST_FILE, json.dumps(_to_json(manifest), indent=2).encode("utf-8"))
        for folder in sorted((p for p in tmp.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            _fsync_dir(folder)
        _fsync_dir(tmp)
        os.rename(tmp, final)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def list_versions(root: Path) -> list[str]:
    """Published version ids under ``root``, sorted; tmp folders and manifest-less ones are skipped."""
    if not root.is_dir():
        return []
    return sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir() and not p.name.startswith(".") and (p / MANIFEST_FILE).is_file()
    )


def read_manifest(path: Path) -> Manifest:
    """Parse ``path / manifest.json`` without checking the files it lists.

    Raises:
        IndexIntegrityError: missing or unreadable manifest, or fields of the wrong shape.
    """
    manifest_path = path / MANIFEST_FILE
    try:
        raw = json.loads(manifest_path.read_text(encoding="utf-8"))
        return _from_json(raw)
    except FileNotFoundError as exc:
        raise IndexIntegrityError(
            f"{manifest_path} is missing: {path} is not a complete index version"
        ) from exc
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise IndexIntegrityError(f"{manifest_path} is unreadable: {type(exc).__name__}: {exc}") from exc


def verify_version(path: Path, holds: Callable[[int], bool] | None = None) -> Manifest:
    """Check every file of a version (or of the shards ``holds`` names) against its manifest
    before serving it.

    Checks the manifest format and id, each listed file's presence, size and sha256, and
    that the row counts of ``row_ids.npy``, ``lexical/row_ids.npy`` and ``vectors.npy``
    match the shard's ``n_vectors``. A shard server checks only the shards it loads.

    Returns:
        The manifest.

    Raises:
        IndexIntegrityError: naming the first bad file.
    """
    manifest = read_manifest(path)
    if manifest.format_version != FORMAT_VERSION:
        raise IndexIntegrityError(
            f"{path}: manifest format {manifest.format_version}, expected {FORMAT_VERSION}"
        )
    if manifest.version_id != path.name:
        raise IndexIntegrityError(f"{path}: manifest names version {manifest.version_id!r}")
    for number, shard in enumerate(manifest.shards):
        if holds is not None and not holds(number):
            continue
        for entry in shard.files:
            _verify_file(path / entry.path, entry)
        _verify_counts(path / shard.path, shard.n_vectors, manifest.dim)
    return manifest


def verify_shard_file(path: Path, manifest: Manifest, shard: int, name: str) -> Path:
    """One file of one shard checked against the manifest (size, sha256); returns its path.

    Raises:
        IndexIntegrityError: the manifest does not list it, or it fails the check.
    """
    entry_path = f"{manifest.shards[shard].path}/{name}"
    for entry in manifest.shards[shard].files:
        if entry.path == entry_path:
            _verify_file(path / entry.path, entry)
            return path / entry.path
    raise IndexIntegrityError(f"{path}: the manifest lists no {entry_path}")


def _verify_file(file: Path, entry: FileEntry) -> None:
    if not file.is_file():
        raise IndexIntegrityError(f"{file} is missing")
    size = file.stat().st_size
    if size != entry.size:
        raise IndexIntegrityError(f"{file} has {size} bytes, manifest says {entry.size} (truncated?)")
    digest = _sha256(file, fsync=False)
    if digest != entry.sha256:
        raise IndexIntegrityError(f"{file} fails its sha256 check (corrupt)")


def _verify_counts(shard_dir: Path, n_vectors: int, dim: int) -> None:
    expected = {
        "row_ids.npy": (n_vectors,),
        "lexical/row_ids.npy": (n_vectors,),
        "vectors.npy": (n_vectors, dim),
    }
    for name, shape in expected.items():
        file = shard_dir / name
        try:
            found = np.load(file, mmap_mode="r").shape
        except (OSError, ValueError) as exc:
            raise IndexIntegrityError(f"{file} is unreadable: {exc}") from exc
        if found != shape:
            raise IndexIntegrityError(f"{file} has shape {found}, manifest implies {shape}")


def _describe_files(version_dir: Path, shard_dir: Path) -> tuple[FileEntry, ...]:
    files = sorted(p for p in shard_dir.rglob("*") if p.is_file())
    return tuple(
        FileEntry(
            path=p.relative_to(version_dir).as_posix(), size=p.stat().st_size, sha256=_sha256(p, fsync=True)
        )
        for p in files
    )


def _sha256(file: Path, *, fsync: bool) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
        if fsync:
            # The bytes just hashed are the bytes that must be durable before the rename.
            os.fsync(handle.fileno())
    return digest.hexdigest()


def _write_synced(file: Path, data: bytes) -> None:
    with open(file, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _to_json(manifest: Manifest) -> dict[str, Any]:
    raw = asdict(manifest)
    raw["tokenizer"] = manifest.tokenizer.config()
    return raw


def _from_json(raw: dict[str, Any]) -> Manifest:
    shards = tuple(
        ShardEntry(
            path=str(s["path"]),
            n_vectors=int(s["n_vectors"]),
            kind=str(s["kind"]),
            requested_kind=str(s["requested_kind"]),
            fallback_reason=s["fallback_reason"],
            dense_params=DenseParams(**s["dense_params"]),
            files=tuple(FileEntry(str(f["path"]), int(f["size"]), str(f["sha256"])) for f in s["files"]),
        )
        for s in raw["shards"]
    )
    return Manifest(
        format_version=int(raw["format_version"]),
        version_id=str(raw["version_id"]),
        model_name=str(raw["model_name"]),
        dim=int(raw["dim"]),
        catalog_position=int(raw["catalog_position"]),
        chunk_count=int(raw["chunk_count"]),
        build_seconds=float(raw["build_seconds"]),
        created_at=str(raw["created_at"]),
        tokenizer=Tokenizer.from_config(raw["tokenizer"]),
        shards=shards,
    )

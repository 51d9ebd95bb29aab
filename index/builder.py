"""Build and load whole index versions: shard assignment, dense + lexical shards, manifest.

Shard layout inside a version folder: ``shard-NNNN/`` holds the dense files
(``index.faiss``, ``vectors.npy``, ``row_ids.npy``, ``dense.json``) and ``lexical/`` the
BM25 files. Inside a shard, positions are sorted by catalog row id, identical for the dense
and the lexical side, so one ``allowed`` mask serves both. Empty shards are built and kept
(they search to nothing) so that shard numbers always equal hash buckets.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np

from core.errors import IndexIntegrityError, InvalidInputError
from index.bm25_shards import LexicalShard
from index.faiss_shards import ROW_IDS_FILE, DenseKind, DenseParams, DenseShard, choose_kind
from index.manifest import (
    Manifest,
    ShardEntry,
    VersionContents,
    verify_shard_file,
    verify_version,
    write_version,
)
from index.tokenize import Tokenizer

logger = logging.getLogger(__name__)

ShardBy = Literal["document", "tenant"]
LEXICAL_DIR = "lexical"


def shard_dir_name(shard: int) -> str:
    return f"shard-{shard:04d}"


def _bucket(key: str, n_shards: int) -> int:
    # blake2b, not hash(): Python salts str hashes per process, shards must be stable forever.
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % n_shards


def assign_shards(
    doc_ids: np.ndarray, tenant_ids: Sequence[str] | None, n_shards: int, shard_by: ShardBy
) -> np.ndarray:
    """Stable shard number per chunk; every chunk of a document (or tenant) shares a shard.

    Args:
        doc_ids: (n,) int64 document id of each chunk.
        tenant_ids: tenant of each chunk; required when ``shard_by == "tenant"``.
        n_shards: number of shards (>= 1).
        shard_by: hash the document id or the tenant id.

    Returns:
        (n,) int64 shard numbers in ``[0, n_shards)``.
    """
    if n_shards < 1:
        raise InvalidInputError(f"n_shards must be >= 1, got {n_shards}")
    if shard_by == "tenant":
        if tenant_ids is None or len(tenant_ids) != len(doc_ids):
            raise InvalidInputError("shard_by='tenant' needs one tenant id per chunk")
        keys = np.asarray(tenant_ids, dtype=object)
        prefix = "t:"
    elif shard_by == "document":
        keys = np.asarray(doc_ids, dtype=np.int64)
        prefix = "d:"
    else:
        raise InvalidInputError(f"unknown shard_by {shard_by!r}")
    if len(keys) == 0:
        return np.zeros(0, dtype=np.int64)
    # Hash each distinct key once: documents have many chunks, tenants many documents.
    unique, inverse = np.unique(keys, return_inverse=True)
    buckets = np.array([_bucket(f"{prefix}{key}", n_shards) for key in unique], dtype=np.int64)
    return buckets[inverse.reshape(-1)]


def auto_params(
    template: DenseParams, *, flat_max: int, ivfpq_min: int, force: DenseKind | None = None
) -> Callable[[int], DenseParams]:
    """Per-shard parameters: ``template`` with its kind chosen by ``choose_kind(n)``, or ``force``."""

    def params_for(n: int) -> DenseParams:
        kind = force or choose_kind(n, flat_max=flat_max, ivfpq_min=ivfpq_min)
        return replace(template, kind=kind)

    return params_for


def build_version(
    root: Path,
    version_id: str,
    *,
    row_ids: np.ndarray,
    doc_ids: np.ndarray,
    tenant_ids: Sequence[str] | None,
    texts: Sequence[str],
    vectors: np.ndarray,
    n_shards: int,
    shard_by: ShardBy,
    dense_params_for: Callable[[int], DenseParams],
    tokenizer: Tokenizer,
    model_name: str,
    catalog_position: int,
    k1: float = 0.9,
    b: float = 0.4,
) -> Path:
    """Build every shard of a new index version and publish it with its manifest.

    Args:
        root: folder of all versions.
        version_id: the new version's name.
        row_ids: (n,) int64 catalog chunk row ids.
        doc_ids: (n,) int64 document id of each chunk.
        tenant_ids: tenant of each chunk (needed for ``shard_by="tenant"``).
        texts: chunk texts for BM25.
        vectors: (n, d) float32 L2-normalised embeddings.
        n_shards: shard count.
        shard_by: "document" or "tenant".
        dense_params_for: dense parameters for a shard of the given size (see ``auto_params``).
        tokenizer: lexical tokenizer configuration.
        model_name: embedding model that produced ``vectors``.
        catalog_position: catalog change position the snapshot reflects.
        k1: BM25 k1.
        b: BM25 b.

    Returns:
        The published version folder.
    """
    row_ids = np.asarray(row_ids, dtype=np.int64)
    vectors = np.asarray(vectors, dtype=np.float32)
    n = len(row_ids)
    if vectors.ndim != 2 or len(vectors) != n or len(doc_ids) != n or len(texts) != n:
        raise InvalidInputError(
            f"row_ids ({n}), doc_ids ({len(doc_ids)}), texts ({len(texts)}) and vectors "
            f"{vectors.shape} must have one row per chunk"
        )
    shard_of = assign_shards(np.asarray(doc_ids, dtype=np.int64), tenant_ids, n_shards, shard_by)

    def build(folder: Path) -> VersionContents:
        entries = []
        for shard in range(n_shards):
            members = np.flatnonzero(shard_of == shard)
            members = members[np.argsort(row_ids[members], kind="stable")]
            entries.append(
                _build_shard(
                    folder, shard, members, row_ids, texts, vectors, dense_params_for, tokenizer, k1, b
                )
            )
        return VersionContents(
            model_name=model_name,
            dim=int(vectors.shape[1]),
            catalog_position=catalog_position,
            tokenizer=tokenizer,
            shards=tuple(entries),
        )

    return write_version(root, version_id, build)


def _build_shard(
    folder: Path,
    shard: int,
    members: np.ndarray,
    row_ids: np.ndarray,
    texts: Sequence[str],
    vectors: np.ndarray,
    dense_params_for: Callable[[int], DenseParams],
    tokenizer: Tokenizer,
    k1: float,
    b: float,
) -> ShardEntry:
    shard_dir = folder / shard_dir_name(shard)
    shard_rows = row_ids[members]
    params = dense_params_for(len(members))
    dense = DenseShard.build(vectors[members], shard_rows, params)
    dense.save(shard_dir)
    lexical = LexicalShard.build([texts[i] for i in members], shard_rows, tokenizer, k1=k1, b=b)
    lexical.save(shard_dir / LEXICAL_DIR)
    logger.info("built shard %d: %d chunks, dense %s", shard, len(members), dense.kind)
    return ShardEntry(
        path=shard_dir_name(shard),
        n_vectors=len(members),
        kind=dense.kind,
        requested_kind=dense.requested_kind,
        fallback_reason=dense.fallback_reason,
        dense_params=dense.params,
    )


@dataclass(frozen=True, slots=True)
class ShardPair:
    """The dense and lexical halves of one shard; positions and ``row_ids`` are shared."""

    shard: int
    dense: DenseShard
    lexical: LexicalShard

    @property
    def row_ids(self) -> np.ndarray:
        return self.dense.row_ids


@dataclass(frozen=True, slots=True)
class ShardSelection:
    """Which shards of a version a process loads: shards are dealt by number to ``n_groups``
    groups (group g holds g, g + n, ...), so any version, whatever its shard count, is fully
    covered by the groups together. ``n_groups == 0`` holds no shard (an API process that fans
    out to shard servers); ``delta`` says whether the process also serves the fresh-writes
    delta (one process does: in-process serving, or shard server 0)."""

    group: int = 0
    n_groups: int = 1
    delta: bool = True

    @classmethod
    def group_of(cls, group: int, n_groups: int) -> ShardSelection:
        """Shard server ``group`` of ``n_groups``; the first also serves the delta."""
        if n_groups < 1 or not 0 <= group < n_groups:
            raise InvalidInputError(f"shard group {group} of {n_groups} does not exist")
        return cls(group, n_groups, group == 0)

    @classmethod
    def nothing(cls) -> ShardSelection:
        return cls(0, 0, False)

    def holds(self, shard: int) -> bool:
        return self.n_groups > 0 and shard % self.n_groups == self.group


EVERYTHING = ShardSelection()


@dataclass(frozen=True, slots=True)
class LoadedVersion:
    """A version's manifest (every shard listed) and the shards this process loaded."""

    version_id: str
    path: Path
    manifest: Manifest
    shards: tuple[ShardPair, ...]

    def row_ids_by_shard(self) -> tuple[np.ndarray, ...]:
        """Every shard's sorted row ids, loaded here or not: the unloaded ones memory-mapped
        (checked against the manifest), so a lookup touches a few pages, not the file."""
        loaded = {pair.shard: pair.row_ids for pair in self.shards}
        return tuple(
            loaded[n]
            if n in loaded
            else np.load(verify_shard_file(self.path, self.manifest, n, ROW_IDS_FILE), mmap_mode="r")
            for n in range(len(self.manifest.shards))
        )


def load_version(path: Path, mmap: bool = True, select: ShardSelection = EVERYTHING) -> LoadedVersion:
    """Verify the selected shards' files against the manifest, then load those shards.

    Raises:
        IndexIntegrityError: when verification or loading fails.
    """
    manifest = verify_version(path, select.holds)
    shards = []
    for number, entry in enumerate(manifest.shards):
        if not select.holds(number):
            continue
        shard_dir = path / entry.path
        dense = DenseShard.load(shard_dir, mmap=mmap)
        lexical = LexicalShard.load(shard_dir / LEXICAL_DIR, mmap=mmap)
        if not np.array_equal(dense.row_ids, lexical.row_ids):
            raise IndexIntegrityError(f"{shard_dir}: dense and lexical row_ids.npy differ")
        shards.append(ShardPair(shard=number, dense=dense, lexical=lexical))
    return LoadedVersion(version_id=manifest.version_id, path=path, manifest=manifest, shards=tuple(shards))

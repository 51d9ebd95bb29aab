"""Index versions: atomic publication, verification, and the builder on top of them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.errors import ConflictError, IndexIntegrityError
from index.builder import assign_shards, auto_params, build_version, load_version
from index.manifest import (
    MANIFEST_FILE,
    VersionContents,
    list_versions,
    read_manifest,
    verify_version,
    write_version,
)
from index.tokenize import Tokenizer
from tests.factories import dense
from tests.unit.index.conftest import clustered

N, DIM = 600, 16


def _build(root: Path, version_id: str = "v1", n_shards: int = 3) -> Path:
    rng = np.random.default_rng(0)
    doc_ids = rng.integers(0, 80, N)
    return build_version(
        root,
        version_id,
        row_ids=np.arange(N, dtype=np.int64) * 10,
        doc_ids=doc_ids,
        tenant_ids=None,
        texts=[f"document {d} chunk {i} alpha{i % 7}" for i, d in enumerate(doc_ids)],
        vectors=clustered(N, DIM, seed=3),
        n_shards=n_shards,
        shard_by="document",
        dense_params_for=auto_params(dense(hnsw_m=8), flat_max=150, ivfpq_min=10**9),
        tokenizer=Tokenizer(),
        model_name="test-model",
        catalog_position=1234,
    )


@pytest.fixture(scope="module")
def version(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory.mktemp("versions"))


def test_round_trip_writes_and_verifies(version: Path) -> None:
    manifest = verify_version(version)
    assert manifest == read_manifest(version)
    assert (manifest.version_id, manifest.model_name, manifest.dim) == ("v1", "test-model", DIM)
    assert manifest.catalog_position == 1234 and manifest.chunk_count == N
    assert [s.path for s in manifest.shards] == ["shard-0000", "shard-0001", "shard-0002"]
    assert all(s.files and s.kind in ("flat", "hnsw") for s in manifest.shards)
    assert list_versions(version.parent) == ["v1"]


def test_load_version_maps_row_ids_and_searches(version: Path) -> None:
    loaded = load_version(version)
    all_rows = np.concatenate([pair.row_ids for pair in loaded.shards])
    np.testing.assert_array_equal(np.sort(all_rows), np.arange(N) * 10)
    pair = next(p for p in loaded.shards if p.dense.ntotal)
    _, found = pair.dense.search(np.asarray(pair.dense.vectors[:1]), 1, allowed=None, strategy="exact")
    assert pair.row_ids[found[0, 0]] == pair.row_ids[0]
    _, hits = pair.lexical.search("alpha3", 5, allowed=None)
    assert len(hits) > 0


def _copy(version: Path, tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "v1"
    shutil.copytree(version, target)
    return target


def test_corrupt_byte_is_detected(version: Path, tmp_path: Path) -> None:
    copy = _copy(version, tmp_path)
    victim = copy / "shard-0001" / "vectors.npy"
    data = bytearray(victim.read_bytes())
    data[-3] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(IndexIntegrityError, match="shard-0001/vectors.npy.*sha256"):
        verify_version(copy)
    with pytest.raises(IndexIntegrityError):
        load_version(copy)


def test_truncated_and_missing_files_are_detected(version: Path, tmp_path: Path) -> None:
    copy = _copy(version, tmp_path)
    victim = copy / "shard-0000" / "lexical" / "row_ids.npy"
    victim.write_bytes(victim.read_bytes()[:-8])
    with pytest.raises(IndexIntegrityError, match="lexical/row_ids.npy.*truncated"):
        verify_version(copy)
    victim.unlink()
    with pytest.raises(IndexIntegrityError, match="missing"):
        verify_version(copy)


def test_missing_or_garbled_manifest(version: Path, tmp_path: Path) -> None:
    copy = _copy(version, tmp_path)
    (copy / MANIFEST_FILE).write_text("{not json", encoding="utf-8")
    with pytest.raises(IndexIntegrityError, match="unreadable"):
        verify_version(copy)
    (copy / MANIFEST_FILE).unlink()
    with pytest.raises(IndexIntegrityError, match="missing"):
        verify_version(copy)


def test_count_mismatch_is_detected(version: Path, tmp_path: Path) -> None:
    copy = _copy(version, tmp_path)
    raw = json.loads((copy / MANIFEST_FILE).read_text(encoding="utf-8"))
    raw["shards"][0]["n_vectors"] += 1
    (copy / MANIFEST_FILE).write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(IndexIntegrityError, match="shape"):
        verify_version(copy)


def test_failed_build_leaves_no_version(tmp_path: Path) -> None:
    def broken(folder: Path) -> VersionContents:
        (folder / "shard-0000").mkdir()
        (folder / "shard-0000" / "half.bin").write_bytes(b"x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_version(tmp_path, "v2", broken)
    assert list(tmp_path.iterdir()) == []


def test_half_written_tmp_dir_is_not_a_version(tmp_path: Path) -> None:
    tmp = tmp_path / ".tmp-v3-abcd1234"
    (tmp / "shard-0000").mkdir(parents=True)
    (tmp / MANIFEST_FILE).write_text("{}", encoding="utf-8")
    (tmp_path / "v4").mkdir()  # a folder without manifest is not a version either
    assert list_versions(tmp_path) == []


def test_existing_version_is_not_overwritten(version: Path) -> None:
    with pytest.raises(ConflictError):
        _build(version.parent, "v1")


def test_assign_shards_is_stable_and_keeps_documents_together() -> None:
    doc_ids = np.array([5, 9, 5, 12, 9, 5], dtype=np.int64)
    shards = assign_shards(doc_ids, None, 4, "document")
    assert shards[0] == shards[2] == shards[5] and shards[1] == shards[4]
    np.testing.assert_array_equal(shards, assign_shards(doc_ids, None, 4, "document"))
    # Pinned values: a change here would re-shard every existing deployment.
    np.testing.assert_array_equal(assign_shards(np.arange(6), None, 4, "document"), _PINNED)
    tenants = ["a", "b", "a", "c", "b", "a"]
    by_tenant = assign_shards(doc_ids, tenants, 4, "tenant")
    assert by_tenant[0] == by_tenant[2] == by_tenant[5] and by_tenant[1] == by_tenant[4]
    assert set(assign_shards(np.arange(1000), None, 4, "document")) == {0, 1, 2, 3}


_PINNED = np.array([0, 2, 2, 0, 0, 1])

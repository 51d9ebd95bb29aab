"""Loading part of a version: a shard server loads (and verifies) only its group's shards, an
API that fans out loads none, and every role can still tell which rows the version holds."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from core.errors import IndexIntegrityError, InvalidInputError
from index.builder import ShardSelection, load_version
from tests.unit.index.test_manifest import N, _build


@pytest.fixture
def version(tmp_path: Path) -> Path:
    return _build(tmp_path, n_shards=4)


def test_groups_load_disjoint_shards_that_cover_the_version(version: Path) -> None:
    everything = load_version(version)
    groups = [load_version(version, select=ShardSelection.group_of(g, 3)) for g in range(3)]
    assert [tuple(p.shard for p in v.shards) for v in groups] == [(0, 3), (1,), (2,)]
    assert [ShardSelection.group_of(g, 3).delta for g in range(3)] == [True, False, False]
    held = np.sort(np.concatenate([p.row_ids for v in groups for p in v.shards]))
    assert np.array_equal(held, np.sort(np.concatenate([p.row_ids for p in everything.shards])))
    assert len(held) == N
    for v in groups:  # the manifest is whole, the loaded shards are the group's
        assert v.manifest == everything.manifest
        for pair in v.shards:
            assert np.array_equal(pair.row_ids, everything.shards[pair.shard].row_ids)


def test_the_fan_out_api_loads_no_shard_but_knows_every_row(version: Path) -> None:
    api = load_version(version, select=ShardSelection.nothing())
    assert api.shards == () and len(api.manifest.shards) == 4
    rows = api.row_ids_by_shard()
    assert all(isinstance(r, np.memmap) for r in rows)  # mapped, not read into memory
    everything = load_version(version)
    assert [r.tolist() for r in rows] == [p.row_ids.tolist() for p in everything.shards]


def test_a_server_verifies_only_its_own_shards(version: Path) -> None:
    vectors = version / "shard-0000" / "vectors.npy"
    vectors.write_bytes(vectors.read_bytes()[:-8])  # truncated: shard 0 is corrupt
    with pytest.raises(IndexIntegrityError, match="shard-0000"):
        load_version(version, select=ShardSelection.group_of(0, 2))
    other = load_version(version, select=ShardSelection.group_of(1, 2))
    assert [p.shard for p in other.shards] == [1, 3]
    shutil.copy(version / "shard-0001" / "row_ids.npy", version / "shard-0000" / "row_ids.npy")
    with pytest.raises(IndexIntegrityError, match="shard-0000/row_ids.npy"):
        other.row_ids_by_shard()  # another shard's row ids are checked before they are used


def test_a_group_that_does_not_exist_is_refused() -> None:
    for group, n in ((2, 2), (-1, 2), (0, 0)):
        with pytest.raises(InvalidInputError):
            ShardSelection.group_of(group, n)

"""The composition root honours every setting it reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.settings import Settings
from index.builder import auto_params
from services.maintenance import MaintenanceScheduler
from wiring import embedding_spec, maintenance_scheduler, rebuild_config
from wiring.embedding import query_embedding_spec
from wiring.index import dense_params, maintenance_policy


def test_rebuild_config_reads_the_index_settings(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path,
        embedding_model="/models/mini",
        index={"shards": 3, "shard_by": "tenant", "hnsw_m": 12, "hnsw_ef_search": 90, "ivf_nprobe": 7},
    )
    config = rebuild_config(settings)
    assert config.index_root == tmp_path / "indexes"
    assert config.model_name == "/models/mini"
    assert (config.n_shards, config.shard_by) == (3, "tenant")
    assert (config.dense.hnsw_m, config.dense.ef_search, config.dense.nprobe) == (12, 90, 7)
    assert config.force_kind is None
    assert rebuild_config(settings, shards=5).n_shards == 5


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivfpq"])
def test_a_forced_kind_reaches_every_shard_size(kind: str, tmp_path: Path) -> None:
    config = rebuild_config(Settings(data_dir=tmp_path, index={"kind": kind}))
    assert config.force_kind == kind
    params_for = auto_params(
        config.dense,
        flat_max=config.flat_max_vectors,
        ivfpq_min=config.ivfpq_min_vectors,
        force=config.force_kind,
    )
    assert {params_for(n).kind for n in (1, 50_000, 5_000_000)} == {kind}


def test_auto_kind_follows_the_size_policy(tmp_path: Path) -> None:
    config = rebuild_config(
        Settings(data_dir=tmp_path, index={"flat_max_vectors": 10, "ivfpq_min_vectors": 100})
    )
    params_for = auto_params(config.dense, flat_max=10, ivfpq_min=100, force=config.force_kind)
    assert [params_for(n).kind for n in (10, 11, 100)] == ["flat", "hnsw", "ivfpq"]


def test_dense_params_copy_every_build_setting() -> None:
    ix = Settings().index
    p = dense_params(Settings())
    assert (p.hnsw_m, p.ef_construction, p.ef_search) == (
        ix.hnsw_m,
        ix.hnsw_ef_construction,
        ix.hnsw_ef_search,
    )
    assert (p.nlist, p.nprobe, p.pq_m, p.pq_nbits) == (ix.ivf_nlist, ix.ivf_nprobe, ix.pq_m, ix.pq_nbits)


def test_maintenance_is_off_at_zero_seconds() -> None:
    assert maintenance_scheduler(Settings(index={"maintenance_seconds": 0}), "postgresql://x/y") is None
    on = maintenance_scheduler(Settings(index={"maintenance_seconds": 30}), "postgresql://x/y")
    assert isinstance(on, MaintenanceScheduler) and on.policy.interval_seconds == 30


def test_maintenance_policy_reads_thresholds() -> None:
    policy = maintenance_policy(
        Settings(index={"rebuild_tombstone_ratio": 0.4, "rebuild_delta_chunks": 9, "gc_grace_seconds": 5})
    )
    assert (policy.tombstone_ratio, policy.delta_chunks, policy.gc_grace_seconds) == (0.4, 9, 5)


def test_embedding_spec_reads_the_model_settings(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path,
        embedding_device="cpu",
        embedding_backend="torch",
        embedding_threads=3,
        ingest={"embed_batch_size": 17},
    )
    spec = embedding_spec(settings)
    assert (spec.device, spec.backend, spec.threads, spec.batch_size) == ("cpu", "torch", 3, 17)
    assert spec.onnx_dir is not None and spec.onnx_dir.is_relative_to(tmp_path.resolve())
    assert embedding_spec(settings, batch_size=4).batch_size == 4


def test_the_query_spec_carries_the_query_precision(tmp_path: Path) -> None:
    assert query_embedding_spec(Settings(data_dir=tmp_path)).precision == "fp32"
    spec = query_embedding_spec(Settings(data_dir=tmp_path, embedding_query_precision="int8"))
    assert (spec.precision, spec.batch_size) == ("int8", 32)
    assert spec.for_model("/models/other").precision == "int8"  # a migration's model too
    assert embedding_spec(Settings(data_dir=tmp_path, embedding_query_precision="int8")).precision == "fp32"

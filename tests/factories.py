"""Test configs built the way the server builds them: from ``Settings`` through ``wiring``,
with a test's few overrides on top, so no test repeats a default."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from core.settings import Settings
from index.embedder import EmbeddingSpec
from index.faiss_shards import DenseParams
from ingest.pipeline import ChunkingConfig
from jobs.rebuild_job import RebuildConfig
from jobs.runner import RunnerConfig
from services.maintenance import MaintenancePolicy
from wiring import dense_params, embedding_spec, rebuild_config
from wiring.index import maintenance_policy
from wiring.ingest import chunking_config, runner_config


def dense(**overrides: Any) -> DenseParams:
    return replace(dense_params(Settings()), **overrides)


def rebuild(
    index_root: Path, *, dense_overrides: dict[str, Any] | None = None, **overrides: Any
) -> RebuildConfig:
    base = rebuild_config(Settings())
    return replace(
        base, index_root=index_root, dense=replace(base.dense, **(dense_overrides or {})), **overrides
    )


def chunking(**overrides: Any) -> ChunkingConfig:
    return replace(chunking_config(Settings()), **overrides)


def runner(conninfo: str, data_dir: Path, **overrides: Any) -> RunnerConfig:
    return replace(runner_config(Settings(data_dir=data_dir), conninfo), **overrides)


def embedding(**overrides: Any) -> EmbeddingSpec:
    return replace(embedding_spec(Settings()), **overrides)


def policy(**overrides: Any) -> MaintenancePolicy:
    return replace(maintenance_policy(Settings()), **overrides)

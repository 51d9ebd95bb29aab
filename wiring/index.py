"""Index builds and scheduled maintenance from the settings."""

from __future__ import annotations

from core.settings import Settings
from index.faiss_shards import DenseParams
from index.tokenize import Tokenizer
from jobs.rebuild_job import RebuildConfig
from services.maintenance import MaintenancePolicy

# The alias serving nodes load and maintenance rebuilds into.
LIVE_ALIAS = "live"


def lexical_tokenizer(settings: Settings) -> Tokenizer:
    """The BM25 tokenizer; builds and queries must use the same one."""
    ix = settings.index
    return Tokenizer(
        stem=ix.lexical_stem, stop_words=ix.lexical_stop_words, multilingual=ix.lexical_multilingual
    )


def dense_params(settings: Settings) -> DenseParams:
    """Build and default search parameters of a dense shard (its kind is chosen per shard)."""
    ix = settings.index
    return DenseParams(
        kind="hnsw",
        hnsw_m=ix.hnsw_m,
        ef_construction=ix.hnsw_ef_construction,
        ef_search=ix.hnsw_ef_search,
        nlist=ix.ivf_nlist,
        nprobe=ix.ivf_nprobe,
        pq_m=ix.pq_m,
        pq_nbits=ix.pq_nbits,
        refine_factor=ix.ivf_refine_factor,
    )


def rebuild_config(settings: Settings, shards: int | None = None) -> RebuildConfig:
    """How ``ragline index rebuild`` and the maintenance scheduler build a version."""
    ix = settings.index
    return RebuildConfig(
        index_root=settings.index_dir,
        model_name=settings.embedding_model,
        n_shards=shards or ix.shards,
        shard_by=ix.shard_by,
        dense=dense_params(settings),
        flat_max_vectors=ix.flat_max_vectors,
        ivfpq_min_vectors=ix.ivfpq_min_vectors,
        force_kind=None if ix.kind == "auto" else ix.kind,
        tokenizer=lexical_tokenizer(settings),
    )


def maintenance_policy(settings: Settings) -> MaintenancePolicy:
    ix = settings.index
    return MaintenancePolicy(
        alias=LIVE_ALIAS,
        interval_seconds=ix.maintenance_seconds,
        tombstone_ratio=ix.rebuild_tombstone_ratio,
        delta_chunks=ix.rebuild_delta_chunks,
        gc_grace_seconds=ix.gc_grace_seconds,
        audit_retention_seconds=settings.audit.retention_days * 86400.0,
        upload_dir=settings.upload_dir,
        upload_gc_grace_seconds=settings.ingest.upload_gc_grace_seconds,
        purge_after_seconds=float(settings.retention.purge_after_seconds),
    )

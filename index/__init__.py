"""ragline index package: dense (FAISS) and lexical (BM25) shards, versions and manifests."""

from index.bm25_shards import LexicalShard
from index.builder import (
    LoadedVersion,
    ShardPair,
    ShardSelection,
    assign_shards,
    auto_params,
    build_version,
    load_version,
)
from index.capacity import CapacityReport, estimate_capacity, format_report
from index.faiss_shards import DenseParams, DenseShard, choose_kind, exact_search
from index.manifest import Manifest, list_versions, read_manifest, verify_version, write_version
from index.tokenize import Tokenizer

__all__ = [
    "CapacityReport",
    "DenseParams",
    "DenseShard",
    "LexicalShard",
    "LoadedVersion",
    "Manifest",
    "ShardPair",
    "ShardSelection",
    "Tokenizer",
    "assign_shards",
    "auto_params",
    "build_version",
    "choose_kind",
    "estimate_capacity",
    "exact_search",
    "format_report",
    "list_versions",
    "load_version",
    "read_manifest",
    "verify_version",
    "write_version",
]

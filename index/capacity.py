"""Capacity planning: bytes of RAM and disk a dense index needs, as a pure function.

Sizes follow FAISS's in-memory layouts (float32 vectors, int32 HNSW links, int64 IVF ids)
plus what ragline adds per shard: the raw ``vectors.npy`` kept for exact search and refine,
and ``row_ids.npy``. Estimates, not measurements: ``bench.index`` prints measured sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from index.faiss_shards import DenseKind, auto_nlist

FLOAT_BYTES = 4
ID_BYTES = 8
LINK_BYTES = 4
# HNSW per-vector bookkeeping besides links: level (int32) + offsets (size_t) + assign prob.
HNSW_NODE_OVERHEAD = 4 + 8


@dataclass(frozen=True, slots=True)
class CapacityReport:
    """Estimated sizes in bytes for one index version of ``n_vectors`` x ``dim``.

    ``serve_ram_bytes`` counts the chosen index, the raw vectors (memory-mapped, but hot
    under exact search and refine) and the row ids; ``swap_extra_bytes`` is the room a
    version swap needs on top, since old and new are loaded side by side until the switch.
    """

    n_vectors: int
    dim: int
    kind: DenseKind
    raw_vector_bytes: int
    row_id_bytes: int
    flat_index_bytes: int
    hnsw_index_bytes: int
    ivfpq_index_bytes: int
    index_bytes: int
    serve_ram_bytes: int
    disk_bytes: int
    swap_extra_bytes: int


def hnsw_index_bytes(n: int, dim: int, m: int) -> int:
    """HNSW flat storage plus links: 2*M at level 0, M per upper level (expected 1/(M-1) levels)."""
    links_per_vector = 2 * m + m / max(m - 1, 1)
    return int(n * (dim * FLOAT_BYTES + links_per_vector * LINK_BYTES + HNSW_NODE_OVERHEAD))


def ivfpq_index_bytes(n: int, dim: int, pq_m: int, pq_nbits: int, nlist: int) -> int:
    """PQ codes + ids per vector, coarse centroids, and the PQ codebooks."""
    nlist = nlist or auto_nlist(n)
    codes = n * (math.ceil(pq_m * pq_nbits / 8) + ID_BYTES)
    return int(codes + nlist * dim * FLOAT_BYTES + (2**pq_nbits) * dim * FLOAT_BYTES)


def estimate_capacity(
    n_vectors: int,
    dim: int,
    *,
    kind: DenseKind,
    hnsw_m: int = 32,
    pq_m: int = 48,
    pq_nbits: int = 8,
    nlist: int = 0,
) -> CapacityReport:
    """Estimate the RAM and disk a version of ``n_vectors`` ``dim``-d vectors needs.

    Args:
        n_vectors: vectors across all shards.
        dim: embedding dimension.
        kind: the index kind that will be served.
        hnsw_m: HNSW M.
        pq_m: PQ sub-quantizers.
        pq_nbits: bits per PQ code.
        nlist: IVF lists (0 = ~4*sqrt(n)).

    Returns:
        The report; per-kind index sizes are filled for comparison whatever ``kind`` is.
    """
    raw = n_vectors * dim * FLOAT_BYTES
    row_ids = n_vectors * ID_BYTES
    sizes = {
        "flat": raw,
        "hnsw": hnsw_index_bytes(n_vectors, dim, hnsw_m),
        "ivfpq": ivfpq_index_bytes(n_vectors, dim, pq_m, pq_nbits, nlist),
    }
    index = sizes[kind]
    serve = index + raw + row_ids
    disk = index + raw + 2 * row_ids  # dense and lexical each store row_ids.npy
    return CapacityReport(
        n_vectors=n_vectors,
        dim=dim,
        kind=kind,
        raw_vector_bytes=raw,
        row_id_bytes=row_ids,
        flat_index_bytes=sizes["flat"],
        hnsw_index_bytes=sizes["hnsw"],
        ivfpq_index_bytes=sizes["ivfpq"],
        index_bytes=index,
        serve_ram_bytes=serve,
        disk_bytes=disk,
        swap_extra_bytes=serve,
    )


def _human(n_bytes: int) -> str:
    size = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def format_report(report: CapacityReport) -> str:
    """A plain-text table of the report (BM25 files are not included)."""
    rows = [
        ("vectors", f"{report.n_vectors:,} x {report.dim}"),
        ("served kind", report.kind),
        ("raw vectors (vectors.npy)", _human(report.raw_vector_bytes)),
        ("index if flat", _human(report.flat_index_bytes)),
        ("index if hnsw", _human(report.hnsw_index_bytes)),
        ("index if ivfpq", _human(report.ivfpq_index_bytes)),
        ("RAM to serve", _human(report.serve_ram_bytes)),
        ("disk per version", _human(report.disk_bytes)),
        ("extra during a swap", _human(report.swap_extra_bytes)),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


@dataclass(frozen=True, slots=True)
class ServerShare:
    """A version's RAM split over ``n_servers`` shard servers (shards dealt by number: server i
    holds shards i, i + N, ...). Shards are hash buckets of about equal size, so the busiest
    server holds ``ceil(n_shards / n_servers)`` of them; a swap needs as much again on each
    server (it loads its group of the new version before dropping the old). The API process
    that fans out holds no shard, only the manifest, the catalog view and the query model."""

    n_servers: int
    n_shards: int
    shards_per_server: int
    server_ram_bytes: int
    server_swap_extra_bytes: int


def split_across_servers(report: CapacityReport, *, n_shards: int, n_servers: int) -> ServerShare:
    """The busiest shard server's share of ``report`` when ``n_servers`` hold ``n_shards``."""
    if n_shards < 1 or n_servers < 1:
        raise ValueError(f"need at least one shard and one server, got {n_shards} and {n_servers}")
    most = -(-n_shards // n_servers)
    share = report.serve_ram_bytes * most // n_shards
    return ServerShare(n_servers, n_shards, most, share, share)


def format_share(share: ServerShare) -> str:
    """Plain-text lines for a ``ServerShare``, in ``format_report``'s layout."""
    rows = [
        ("shard servers", f"{share.n_servers} ({share.n_shards} shards, <= {share.shards_per_server} each)"),
        ("RAM per shard server", _human(share.server_ram_bytes)),
        ("extra per server in a swap", _human(share.server_swap_extra_bytes)),
        ("API process (fan-out)", "no shard: manifest, catalog view, query model"),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx", ".pt")


def model_weight_bytes(folder: str) -> int:
    """Bytes of a model folder's weight files: about what one loaded copy of it costs in RAM.

    A serving node holds one query model per version it serves, so during a migration's swap
    (and until the old version is collected) it holds two.
    """
    from pathlib import Path

    root = Path(folder)
    if not root.is_dir():
        return 0
    files = [f for f in root.rglob("*") if f.is_file() and f.suffix in _WEIGHT_SUFFIXES]
    safetensors = [f for f in files if f.suffix == ".safetensors"]
    return sum(f.stat().st_size for f in (safetensors or files))  # one format is loaded, not all

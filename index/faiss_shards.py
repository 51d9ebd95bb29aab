"""Dense vector shards: flat, HNSW or IVF-PQ FAISS indexes behind one search contract.

Vectors are float32 and L2-normalised, scored by inner product (cosine). Inside a shard a
vector is addressed by its dense position ``0..n-1``; ``row_ids[position]`` is the catalog
row id of its chunk. Filters are numpy bool arrays over positions.

Every shard keeps its raw vectors in ``vectors.npy`` next to the FAISS index: exact search
over an allowed subset scores those rows in place (FAISS by position, no copy), and IVF-PQ re-scores its
compressed candidates against them (``refine``). We never use ``faiss.IndexShards``: the
IVF variant drops the ID selector, so the fan-out over shards is ours (``retrieve/``).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import faiss
import numpy as np

from core.errors import IndexIntegrityError, InvalidInputError

logger = logging.getLogger(__name__)

DenseKind = Literal["flat", "hnsw", "ivfpq"]
Strategy = Literal["exact", "filtered", "overfetch", "unfiltered"]

INDEX_FILE = "index.faiss"
VECTORS_FILE = "vectors.npy"
ROW_IDS_FILE = "row_ids.npy"
META_FILE = "dense.json"

# Below this many vectors an IVF-PQ fallback goes to flat (exact, a few ms); above, HNSW.
FALLBACK_FLAT_MAX = 20_000
# FAISS k-means wants at least 39 training points per centroid (it warns below that).
POINTS_PER_CENTROID = 39
TRAIN_SAMPLE_MIN = 50_000
# Rows per matmul block in exact search, so a large allowed set never needs q*n floats at once.
EXACT_BLOCK_ROWS = 65_536


@dataclass(frozen=True, slots=True)
class DenseParams:
    """How to build and, by default, search a dense shard.

    Attributes:
        kind: "flat", "hnsw" or "ivfpq"; see ``choose_kind`` for the policy.
        hnsw_m: HNSW neighbours per node (level 0 keeps 2*M).
        ef_construction: HNSW candidate list size while inserting.
        ef_search: default HNSW candidate list size at query time.
        nlist: IVF lists; 0 picks ~4*sqrt(n).
        nprobe: default IVF lists visited per query.
        pq_m: PQ sub-quantizers; must divide the dimension (the nearest divisor is used).
        pq_nbits: bits per PQ code.
        refine: re-score IVF-PQ candidates with the raw vectors.
        refine_factor: PQ candidates fetched per wanted result when refining; the
            ``k * refine_factor`` candidates are re-scored exactly against ``vectors.npy``.
        seed: seed of the IVF-PQ training sample.
    """

    kind: DenseKind
    hnsw_m: int
    ef_construction: int
    ef_search: int
    nlist: int
    nprobe: int
    pq_m: int
    pq_nbits: int
    refine: bool = True
    # Setting ``index.ivf_refine_factor``; this default only serves shards saved before it.
    refine_factor: int = 4
    # No setting: the seed of the training sample is a property of the build itself.
    seed: int = 1234


def choose_kind(n: int, *, flat_max: int, ivfpq_min: int) -> DenseKind:
    """Pick the index kind for a shard of ``n`` vectors.

    Policy (defaults from ``IndexSettings``: flat_max=20k, ivfpq_min=400k; measured in
    docs/benchmarks.md, "IVF-PQ vs HNSW"):
    - ``n <= flat_max``: flat. Brute force over 20k 384-d vectors is ~2-5 ms on one core,
      exact, needs no build time and no graph memory.
    - ``flat_max < n < ivfpq_min``: HNSW. ~1 ms queries at recall@10 ~0.99 (200k), at the
      price of ~1.8 KB of index per vector (floats + 2*M links) and a super-linear build.
    - ``n >= ivfpq_min``: IVF-PQ with exact refine. ~60 B per vector resident (PQ codes +
      ids), raw vectors read from the memory-mapped ``vectors.npy`` only for the refined
      candidates, a build several times faster than HNSW's, recall@10 ~0.98 at 1M (nprobe
      512, refine x32) for 2-4x HNSW's latency.

    Args:
        n: vectors in the shard.
        flat_max: largest shard served by brute force.
        ivfpq_min: smallest shard compressed with IVF-PQ.

    Returns:
        The kind name.
    """
    if n <= flat_max:
        return "flat"
    if n >= ivfpq_min:
        return "ivfpq"
    return "hnsw"


def auto_nlist(n: int) -> int:
    """~4*sqrt(n) IVF lists, the usual FAISS starting point."""
    return max(1, int(round(4.0 * math.sqrt(max(n, 1)))))


def nearest_divisor(dim: int, wanted: int) -> int:
    """The divisor of ``dim`` closest to ``wanted`` (ties go to the smaller, cheaper one)."""
    divisors = [m for m in range(1, dim + 1) if dim % m == 0]
    return min(divisors, key=lambda m: (abs(m - wanted), m))


def _empty_result(q: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full((q, k), -np.inf, dtype=np.float32), np.full((q, k), -1, dtype=np.int64)


def _topk(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise top-k of a (q, m) score matrix, sorted desc; column -1 / -inf pad when m < k."""
    q, m = scores.shape
    out_s, out_c = _empty_result(q, k)
    kk = min(k, m)
    if kk == 0:
        return out_s, out_c
    if kk < m:
        cols = np.argpartition(-scores, kk - 1, axis=1)[:, :kk]
    else:
        cols = np.broadcast_to(np.arange(m), (q, m))
    vals = np.take_along_axis(scores, cols, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    out_s[:, :kk] = np.take_along_axis(vals, order, axis=1)
    out_c[:, :kk] = np.take_along_axis(cols, order, axis=1)
    out_c[~np.isfinite(out_s)] = -1
    return out_s, out_c


def _map_columns(cols: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Translate top-k column indices into shard positions, keeping -1 padding."""
    if positions.ndim == 1:
        mapped = positions[cols.clip(0)]
    else:
        mapped = np.take_along_axis(positions, cols.clip(0), axis=1)
    return np.where(cols >= 0, mapped, -1).astype(np.int64)


def exact_search(
    vectors: np.ndarray, queries: np.ndarray, k: int, allowed: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Brute-force inner-product search over the allowed rows of ``vectors``.

    Usable on its own for tiny in-memory sets (a delta segment) and by every shard kind.
    A filtered search never gathers the allowed rows into a copy (at 10k of 100k 384-d rows
    the copy alone cost more than the products): FAISS scores them in place by position
    (``knn_inner_products_by_idx``), so a memory-mapped ``vectors.npy`` is read, not copied.

    Args:
        vectors: (n, d) float32, may be a read-only memmap.
        queries: (q, d) float32.
        k: results per query.
        allowed: bool mask over the n rows; None allows all.

    Returns:
        (q, k) float32 scores and (q, k) int64 row positions, best first, padded with
        -inf / -1 when fewer than k rows are allowed.
    """
    if allowed is None:
        return _exact_all(vectors, queries, k)
    positions = np.flatnonzero(allowed).astype(np.int64, copy=False)
    if len(positions) == 0 or len(queries) == 0:
        return _empty_result(len(queries), k)
    return _exact_by_position(vectors, queries, k, positions)


def _exact_by_position(
    vectors: np.ndarray, queries: np.ndarray, k: int, positions: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k over ``vectors[positions]`` without materialising that subset."""
    rows = _contiguous_f32(vectors)
    qs = np.ascontiguousarray(queries, dtype=np.float32)
    if rows.shape[1] != qs.shape[1]:
        raise InvalidInputError(f"queries must be (q, {rows.shape[1]}), got {qs.shape}")
    positions = np.ascontiguousarray(positions, dtype=np.int64)
    scores = np.empty((len(qs), k), dtype=np.float32)
    found = np.empty((len(qs), k), dtype=np.int64)
    # ld_ids=0: every query reads the same position list (no per-query copy of it).
    faiss.knn_inner_products_by_idx(  # type: ignore[attr-defined]
        faiss.swig_ptr(qs),
        faiss.swig_ptr(rows),
        faiss.swig_ptr(positions),
        rows.shape[1],
        len(qs),
        len(rows),
        len(positions),
        k,
        faiss.swig_ptr(scores),
        faiss.swig_ptr(found),
        0,
    )
    scores[found < 0] = -np.inf
    return scores, found


def _contiguous_f32(vectors: np.ndarray) -> np.ndarray:
    """The array itself when it already is C-contiguous float32 (a memmap stays a memmap)."""
    if vectors.dtype == np.float32 and vectors.flags.c_contiguous:
        return vectors
    return np.ascontiguousarray(vectors, dtype=np.float32)


def _exact_all(vectors: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k over every row: blocked BLAS products, never q*n floats at once."""
    best_s, best_p = _empty_result(len(queries), k)
    for start in range(0, len(vectors), EXACT_BLOCK_ROWS):
        block = np.asarray(vectors[start : start + EXACT_BLOCK_ROWS], dtype=np.float32)
        s, cols = _topk(queries @ block.T, k)
        rows = np.where(cols >= 0, cols + start, -1)
        merged_s = np.concatenate([best_s, s], axis=1)
        merged_p = np.concatenate([best_p, rows], axis=1)
        best_s, cols = _topk(merged_s, k)
        best_p = _map_columns(cols, merged_p)
    return best_s, best_p


def _keep_allowed(
    scores: np.ndarray, positions: np.ndarray, allowed: np.ndarray | None, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Drop disallowed or padding hits from sorted FAISS results and keep the first k."""
    valid = positions >= 0
    if allowed is not None:
        valid &= allowed[positions.clip(0)]
    # A stable sort on "not valid" moves valid hits to the front without reordering them.
    order = np.argsort(~valid, axis=1, kind="stable")[:, :k]
    out_s = np.take_along_axis(np.where(valid, scores, -np.inf), order, axis=1).astype(np.float32)
    out_p = np.take_along_axis(np.where(valid, positions, -1), order, axis=1).astype(np.int64)
    if out_s.shape[1] < k:
        pad_s, pad_p = _empty_result(len(scores), k - out_s.shape[1])
        out_s, out_p = np.hstack([out_s, pad_s]), np.hstack([out_p, pad_p])
    return out_s, out_p


@dataclass(frozen=True, slots=True)
class _Tuning:
    """Per-search overrides of the shard's default search parameters."""

    ef_search: int | None
    nprobe: int | None
    refine_factor: int


class DenseShard:
    """One FAISS index plus its raw vectors and position -> catalog row id map."""

    def __init__(
        self,
        index: Any,
        vectors: np.ndarray,
        row_ids: np.ndarray,
        params: DenseParams,
        *,
        fallback_reason: str | None = None,
        requested_kind: DenseKind | None = None,
        nbytes_index: int | None = None,
    ) -> None:
        self._index = index
        self._vectors = vectors
        self.row_ids = row_ids
        self.params = params
        self.fallback_reason = fallback_reason
        self.requested_kind: DenseKind = requested_kind or params.kind
        self._nbytes_index = nbytes_index

    @property
    def ntotal(self) -> int:
        return int(self._index.ntotal)

    @property
    def dim(self) -> int:
        return int(self._index.d)

    @property
    def kind(self) -> DenseKind:
        return self.params.kind

    @property
    def vectors(self) -> np.ndarray:
        return self._vectors

    @property
    def nbytes_index(self) -> int:
        """Serialised size of the FAISS index (the file size once saved or loaded)."""
        if self._nbytes_index is None:
            self._nbytes_index = int(faiss.serialize_index(self._index).nbytes)
        return self._nbytes_index

    @classmethod
    def build(cls, vectors: np.ndarray, row_ids: np.ndarray, params: DenseParams) -> DenseShard:
        """Build a shard; IVF-PQ falls back to flat/HNSW when there is too little to train.

        Args:
            vectors: (n, d) float32 L2-normalised vectors; n may be 0.
            row_ids: (n,) int64 catalog row ids, one per vector.
            params: requested parameters; the effective ones end up in ``shard.params``.

        Returns:
            The built shard, with ``fallback_reason`` set when the kind was changed.

        Raises:
            InvalidInputError: on bad shapes or dtypes.
        """
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        row_ids = np.ascontiguousarray(row_ids, dtype=np.int64)
        if vectors.ndim != 2 or vectors.shape[1] == 0:
            raise InvalidInputError(f"vectors must be (n, d) with d > 0, got {vectors.shape}")
        if row_ids.shape != (len(vectors),):
            raise InvalidInputError(f"row_ids must be ({len(vectors)},), got {row_ids.shape}")
        effective, reason = _resolve_params(len(vectors), vectors.shape[1], params)
        if reason:
            logger.warning("dense shard: %s", reason)
        index = _build_index(vectors, effective)
        return cls(index, vectors, row_ids, effective, fallback_reason=reason, requested_kind=params.kind)

    def search(
        self,
        queries: np.ndarray,
        k: int,
        *,
        allowed: np.ndarray | None,
        strategy: Strategy,
        ef_search: int | None = None,
        nprobe: int | None = None,
        fetch_k: int | None = None,
        refine_factor: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k inner-product search; only allowed positions are ever returned.

        Args:
            queries: (q, d) float32.
            k: results per query (>= 1).
            allowed: bool mask of length ``ntotal``; None allows every position.
            strategy: "exact" (numpy over the allowed rows), "filtered" (FAISS with an
                ``IDSelectorBitmap``), "overfetch" (unfiltered FAISS for ``fetch_k`` then the
                mask) or "unfiltered" (FAISS for k, then the mask).
            ef_search: HNSW efSearch override.
            nprobe: IVF nprobe override.
            fetch_k: candidates for "overfetch" (default k).
            refine_factor: IVF-PQ refine factor override (default ``params.refine_factor``).

        Returns:
            (q, k) float32 scores and (q, k) int64 positions, best first, -inf / -1 padded.
        """
        queries = self._check_queries(queries)
        if k < 1:
            raise InvalidInputError(f"k must be >= 1, got {k}")
        if allowed is not None:
            allowed = np.asarray(allowed, dtype=bool)
            if allowed.shape != (self.ntotal,):
                raise InvalidInputError(f"allowed must be ({self.ntotal},) bool, got {allowed.shape}")
        if self.ntotal == 0 or (allowed is not None and not allowed.any()):
            return _empty_result(len(queries), k)
        if strategy == "exact":
            return exact_search(self._vectors, queries, k, allowed)
        if refine_factor is not None and refine_factor < 1:
            raise InvalidInputError(f"refine_factor must be >= 1, got {refine_factor}")
        tuning = _Tuning(ef_search, nprobe, refine_factor or self.params.refine_factor)
        if strategy == "filtered":
            return self._faiss_search(queries, k, allowed, tuning)
        if strategy in ("overfetch", "unfiltered"):
            wanted = max(k, fetch_k or k) if strategy == "overfetch" else k
            scores, positions = self._faiss_search(queries, min(wanted, self.ntotal), None, tuning)
            return _keep_allowed(scores, positions, allowed, k)
        raise InvalidInputError(f"unknown search strategy {strategy!r}")

    def _check_queries(self, queries: np.ndarray) -> np.ndarray:
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise InvalidInputError(f"queries must be (q, {self.dim}), got {queries.shape}")
        return queries

    def _faiss_search(
        self,
        queries: np.ndarray,
        k: int,
        allowed: np.ndarray | None,
        tuning: _Tuning,
    ) -> tuple[np.ndarray, np.ndarray]:
        refine = self.kind == "ivfpq" and self.params.refine
        # Never ask FAISS for more candidates than the shard holds: it pads with -1 anyway.
        fetch = min(k * tuning.refine_factor, self.ntotal) if refine else k
        # Both objects must outlive the search: the selector points into the packed bitmap.
        bitmap = selector = None
        if allowed is not None:
            bitmap = np.packbits(allowed, bitorder="little")
            selector = faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bitmap))
        search_params = self._search_params(fetch, selector, tuning.ef_search, tuning.nprobe)
        scores, positions = self._index.search(queries, fetch, params=search_params)
        scores = np.where(positions >= 0, scores, -np.inf).astype(np.float32)
        if refine:
            return self._rerank(queries, positions, k)
        return _keep_allowed(scores, positions, allowed, k)

    def _search_params(self, k: int, selector: Any, ef_search: int | None, nprobe: int | None) -> Any:
        if self.kind == "hnsw":
            hnsw_params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]
            hnsw_params.efSearch = max(ef_search or self.params.ef_search, k)
            # With bounded_queue=False HNSW ignores the selector (known FAISS bug).
            hnsw_params.bounded_queue = True
            if selector is not None:
                hnsw_params.sel = selector
            return hnsw_params
        if self.kind == "ivfpq":
            ivf_params = faiss.SearchParametersIVF()
            ivf_params.nprobe = min(nprobe or self.params.nprobe, self.params.nlist)
            if selector is not None:
                ivf_params.sel = selector
            return ivf_params
        if selector is None:
            return None
        flat_params = faiss.SearchParameters()
        flat_params.sel = selector
        return flat_params

    def _rerank(self, queries: np.ndarray, candidates: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Re-score PQ candidates with the raw vectors; exact scores, PQ only picks the pool."""
        rows = np.asarray(self._vectors[candidates.clip(0).ravel()], dtype=np.float32)
        rows = rows.reshape(*candidates.shape, self.dim)
        scores = np.einsum("qd,qcd->qc", queries, rows)
        scores = np.where(candidates >= 0, scores, -np.inf).astype(np.float32)
        best, cols = _topk(scores, k)
        return best, _map_columns(cols, candidates)

    def save(self, directory: Path) -> None:
        """Write index.faiss, vectors.npy, row_ids.npy and dense.json into ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self._index, str(directory / INDEX_FILE))
        np.save(directory / VECTORS_FILE, np.asarray(self._vectors, dtype=np.float32))
        np.save(directory / ROW_IDS_FILE, np.asarray(self.row_ids, dtype=np.int64))
        meta = {
            "kind": self.kind,
            "requested_kind": self.requested_kind,
            "fallback_reason": self.fallback_reason,
            "params": asdict(self.params),
            "n": self.ntotal,
            "dim": self.dim,
        }
        (directory / META_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")
        self._nbytes_index = (directory / INDEX_FILE).stat().st_size

    @classmethod
    def load(cls, directory: Path, mmap: bool = True) -> DenseShard:
        """Load a saved shard, memory-mapping the index and the vectors when possible.

        Raises:
            IndexIntegrityError: when a file is missing or unreadable, or shapes disagree.
        """
        try:
            meta = json.loads((directory / META_FILE).read_text(encoding="utf-8"))
            params = DenseParams(**meta["params"])
            mode: Literal["r"] | None = "r" if mmap else None
            vectors = np.load(directory / VECTORS_FILE, mmap_mode=mode)
            row_ids = np.load(directory / ROW_IDS_FILE, mmap_mode=mode)
            index = _read_index(directory / INDEX_FILE, params.kind, mmap)
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
            raise IndexIntegrityError(f"cannot load dense shard {directory}: {exc}") from exc
        if not (index.ntotal == len(vectors) == len(row_ids) == meta["n"]):
            raise IndexIntegrityError(
                f"dense shard {directory}: index has {index.ntotal} vectors, vectors.npy {len(vectors)}, "
                f"row_ids.npy {len(row_ids)}, dense.json {meta['n']}"
            )
        return cls(
            index,
            vectors,
            row_ids,
            params,
            fallback_reason=meta.get("fallback_reason"),
            requested_kind=meta.get("requested_kind"),
            nbytes_index=(directory / INDEX_FILE).stat().st_size,
        )


def _resolve_params(n: int, dim: int, params: DenseParams) -> tuple[DenseParams, str | None]:
    """Effective parameters for n vectors, and why the kind changed (None if it did not)."""
    if n == 0 and params.kind != "flat":
        return replace(params, kind="flat"), f"empty shard: built flat instead of {params.kind}"
    if params.kind != "ivfpq":
        return params, None
    nlist = params.nlist or auto_nlist(n)
    pq_m = nearest_divisor(dim, params.pq_m)
    if pq_m != params.pq_m:
        logger.warning("dense shard: pq_m=%d does not divide dim=%d, using %d", params.pq_m, dim, pq_m)
    needed = max(nlist, 2**params.pq_nbits) * POINTS_PER_CENTROID
    if n < needed:
        fallback: DenseKind = "flat" if n <= FALLBACK_FLAT_MAX else "hnsw"
        reason = (
            f"ivfpq needs >= {needed} vectors to train nlist={nlist}, nbits={params.pq_nbits} "
            f"({POINTS_PER_CENTROID} per centroid), shard has {n}: built {fallback}"
        )
        return replace(params, kind=fallback), reason
    return replace(params, nlist=nlist, pq_m=pq_m), None


def _build_index(vectors: np.ndarray, p: DenseParams) -> Any:
    dim = vectors.shape[1]
    if p.kind == "flat":
        index = faiss.index_factory(dim, "Flat", faiss.METRIC_INNER_PRODUCT)
        return _gpu_build(index, vectors, None) or _cpu_add(index, vectors)
    if p.kind == "hnsw":
        hnsw: Any = faiss.index_factory(dim, f"HNSW{p.hnsw_m},Flat", faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = p.ef_construction
        hnsw.hnsw.efSearch = p.ef_search
        return _cpu_add(hnsw, vectors)
    index = faiss.index_factory(dim, f"IVF{p.nlist},PQ{p.pq_m}x{p.pq_nbits}", faiss.METRIC_INNER_PRODUCT)
    # Polysemous codes serve Hamming pre-filtering, which we never use; training them is slow.
    ivfpq: Any = faiss.downcast_index(index)
    ivfpq.do_polysemous_training = False
    sample_size = min(len(vectors), max(p.nlist * POINTS_PER_CENTROID, TRAIN_SAMPLE_MIN))
    rng = np.random.default_rng(p.seed)
    sample = vectors[np.sort(rng.choice(len(vectors), size=sample_size, replace=False))]
    built = _gpu_build(index, vectors, sample)
    if built is None:
        index.train(sample)
        built = _cpu_add(index, vectors)
    faiss.extract_index_ivf(built).nprobe = p.nprobe
    return built


def _cpu_add(index: Any, vectors: np.ndarray) -> Any:
    if len(vectors):
        index.add(vectors)
    return index


def _gpu_build(index: Any, vectors: np.ndarray, sample: np.ndarray | None) -> Any | None:
    """Train and fill a flat/IVF index on GPU 0, returned as a CPU index (None: stay on CPU).

    The search contract is unchanged: searches run on the CPU copy, which supports selectors.
    """
    if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() <= 0:
        return None
    try:  # pragma: no cover - needs CUDA
        resources = faiss.StandardGpuResources()
        gpu_index = faiss.index_cpu_to_gpu(resources, 0, index)
        if sample is not None:
            gpu_index.train(sample)
        if len(vectors):
            gpu_index.add(vectors)
        return faiss.index_gpu_to_cpu(gpu_index)
    except RuntimeError as exc:  # pragma: no cover - needs CUDA
        logger.warning("dense shard: GPU build failed, building on CPU: %s", exc)
        return None


def _read_index(path: Path, kind: str, mmap: bool) -> Any:
    """Read an index, memory-mapped where this FAISS build supports it for the kind."""
    if not path.exists():
        raise FileNotFoundError(f"missing {path}")
    if mmap:
        # Flat/HNSW codes map with IO_FLAG_MMAP_IFC; IVF inverted lists map with IO_FLAG_MMAP.
        names = ["IO_FLAG_MMAP_IFC", "IO_FLAG_MMAP"] if kind in ("flat", "hnsw") else ["IO_FLAG_MMAP"]
        for name in names:
            flag = getattr(faiss, name, None)
            if flag is None:
                logger.info("faiss has no %s, trying the next read mode for %s", name, path)
                continue
            try:
                return faiss.read_index(str(path), flag)
            except RuntimeError as exc:
                logger.info(
                    "faiss.read_index(%s, %s) failed (%s), trying the next read mode", path, name, exc
                )
    return faiss.read_index(str(path))

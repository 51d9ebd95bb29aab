"""Shared benchmark helpers: synthetic clustered vectors, timing, recall, plain tables."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

SYNTHETIC_HOW = (
    "synthetic: {clusters} centres ~ N(0, I_{dim}); point = centre + 0.6 * (z @ W) + 0.15 * e, "
    "z ~ N(0, I_{rank}), W a fixed random {rank}x{dim} map, e ~ N(0, I_{dim}); L2-normalised. "
    "Queries drawn the same way (seed + 1). The low-rank term gives the data a realistic "
    "intrinsic dimension; pure isotropic noise makes every neighbour equidistant."
)


def clustered_vectors(
    n: int, n_queries: int, dim: int, *, clusters: int = 1000, rank: int = 32, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, str]:
    """Base and query vectors drawn from the same clustered distribution.

    Returns:
        (base (n, dim) float32, queries (n_queries, dim) float32, a description line).
    """
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim), dtype=np.float32)
    mixing = rng.standard_normal((rank, dim), dtype=np.float32) / np.sqrt(rank)

    def draw(count: int, draw_rng: np.random.Generator) -> np.ndarray:
        out = np.empty((count, dim), dtype=np.float32)
        for start in range(0, count, 50_000):
            m = min(50_000, count - start)
            block = centres[draw_rng.integers(0, clusters, m)]
            block += 0.6 * (draw_rng.standard_normal((m, rank), dtype=np.float32) @ mixing) * np.sqrt(dim / 4)
            block += 0.15 * draw_rng.standard_normal((m, dim), dtype=np.float32)
            out[start : start + m] = block / np.linalg.norm(block, axis=1, keepdims=True)
        return out

    base = draw(n, rng)
    queries = draw(n_queries, np.random.default_rng(seed + 1))
    return base, queries, SYNTHETIC_HOW.format(clusters=clusters, dim=dim, rank=rank)


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean |found ∩ truth| / |truth| per query; -1 padding is ignored on both sides."""
    total = 0.0
    for got, want in zip(found, truth, strict=True):
        wanted = set(want[want >= 0].tolist())
        if wanted:
            total += len(wanted & set(got[got >= 0].tolist())) / len(wanted)
        else:
            total += 1.0
    return total / len(truth)


def time_per_query(fn: Callable[[np.ndarray], Any], queries: np.ndarray, *, batch: int = 1) -> float:
    """Mean wall milliseconds per query, calling ``fn`` on batches of ``batch`` queries."""
    fn(queries[:batch])  # warm caches and lazy allocations
    started = time.perf_counter()
    for start in range(0, len(queries), batch):
        fn(queries[start : start + batch])
    return (time.perf_counter() - started) * 1000 / len(queries)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print a plain, space-aligned table."""
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def generated_texts(n: int, words: int, *, seed: int, vocabulary: int = 20_000) -> list[str]:
    """Chunk-sized texts over a Zipf-distributed vocabulary (a rough stand-in for prose)."""
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i:05d}" for i in range(vocabulary)])
    ranks = np.minimum(rng.zipf(1.3, size=(n, words)) - 1, vocabulary - 1)
    return [" ".join(row) for row in vocab[ranks]]

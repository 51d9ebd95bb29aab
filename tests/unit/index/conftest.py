"""Shared fixtures for the index tests: small clustered corpora, one FAISS thread."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from tests.factories import dense

# The CI box has 2 shared cores: one OpenMP thread keeps timings and HNSW builds stable.
faiss.omp_set_num_threads(1)

DIM = 32
N = 3000

# Forced parameters so IVF-PQ really trains on a small corpus (16 lists, 64 codes).
KIND_PARAMS = {
    "flat": dense(kind="flat"),
    "hnsw": dense(kind="hnsw", hnsw_m=16, ef_construction=80, ef_search=64),
    "ivfpq": dense(kind="ivfpq", nlist=16, nprobe=8, pq_m=8, pq_nbits=6, refine=True, refine_factor=8),
}
# Unfiltered recall@10 each kind must reach against exact search.
MIN_RECALL = {"flat": 1.0, "hnsw": 0.9, "ivfpq": 0.8}


def clustered(n: int, dim: int, seed: int, clusters: int = 40) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).standard_normal((clusters, dim)).astype(np.float32)
    x = centres[rng.integers(0, clusters, n)] + 0.4 * rng.standard_normal((n, dim)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    hits = [
        len(set(f[f >= 0]) & set(t[t >= 0])) / max(1, (t >= 0).sum())
        for f, t in zip(found, truth, strict=True)
    ]
    return float(np.mean(hits))


@pytest.fixture(scope="session")
def corpus() -> np.ndarray:
    return clustered(N, DIM, seed=1)


@pytest.fixture(scope="session")
def queries() -> np.ndarray:
    return clustered(40, DIM, seed=2)

"""Rebuild: a new index version from the catalog's live chunks and stored embeddings.

Never re-embeds: vectors come from ``chunk_embeddings`` for the serving model. The snapshot
is read in one REPEATABLE READ transaction and stamped with its catalog position, so a
serving node loading the version knows exactly which later changes belong in its delta.
Runs in-process, or as a Ray task on the cluster when one is configured (the index root
must then be a volume both see).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psycopg

from catalog import changes as changes_repo
from catalog import chunkings as chunkings_repo
from catalog import indexes as indexes_repo
from catalog import maintenance as maintenance_repo
from index.builder import auto_params, build_version
from index.faiss_shards import DenseKind, DenseParams
from index.manifest import read_manifest
from index.tokenize import Tokenizer
from retrieve.delta import lexical_text

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Snapshot:
    position: int
    rows: np.ndarray
    doc_ids: np.ndarray
    tenant_ids: list[str]
    texts: list[str]
    vectors: np.ndarray
    live_chunks: int  # visible leaf chunks at the position, with a vector for the model or not
    # The chunking (TOKENS/OVERLAP) most of its documents were cut with: the version's, which
    # new ingests use while it serves (None: unknown, versions written before it was recorded).
    chunking: str | None = None


@dataclass(frozen=True, slots=True)
class RebuildConfig:
    """How to build a version; ``wiring.rebuild_config`` fills it from ``IndexSettings``."""

    index_root: Path
    model_name: str
    n_shards: int
    shard_by: str
    dense: DenseParams
    flat_max_vectors: int
    ivfpq_min_vectors: int
    force_kind: DenseKind | None  # every shard gets this kind instead of the size policy
    tokenizer: Tokenizer


def snapshot(conn: psycopg.Connection, *, model: str) -> Snapshot:
    """Every visible leaf chunk with its vector, consistent with one catalog position."""
    rows, docs, tenants, texts, vecs = [], [], [], [], []
    with maintenance_repo.repeatable_read(conn):
        position = changes_repo.current_position(conn)
        live = maintenance_repo.all_live_leaf_count(conn)
        chunking = chunkings_repo.dominant_chunking(chunkings_repo.live_chunkings(conn))
        for chunk in maintenance_repo.iter_live_leaf_chunks(conn, model=model):
            rows.append(chunk.chunk_row)
            docs.append(chunk.doc_id)
            tenants.append(chunk.tenant_id)
            texts.append(lexical_text(chunk.text, chunk.section_path))
            vecs.append(np.frombuffer(chunk.vector, dtype="<f4"))
    vectors = np.stack(vecs).astype(np.float32) if vecs else np.zeros((0, 0), np.float32)
    return Snapshot(
        position, np.array(rows, np.int64), np.array(docs, np.int64), tenants, texts, vectors, live, chunking
    )


def new_version_id() -> str:
    return time.strftime("v%Y%m%d-%H%M%S-", time.gmtime()) + uuid.uuid4().hex[:6]


def rebuild(
    conninfo: str, config: RebuildConfig, *, version_id: str | None = None, built_on: str | None = None
) -> str:
    """Build and register a new ready version; returns its id (the alias is not moved).

    ``built_on`` names the Ray node that built it (kept in the version's params).
    """
    with psycopg.connect(conninfo) as conn:
        snap = snapshot(conn, model=config.model_name)
        return build_snapshot(conn, config, snap, version_id=version_id, built_on=built_on)


def build_snapshot(
    conn: psycopg.Connection,
    config: RebuildConfig,
    snap: Snapshot,
    *,
    version_id: str | None = None,
    built_on: str | None = None,
) -> str:
    """Build and register a ready version from ``snap``; returns its id."""
    version_id = version_id or new_version_id()
    if len(snap.rows) == 0:
        raise ValueError("nothing to index: no live chunks with embeddings for this model")
    dim = int(snap.vectors.shape[1])
    path = config.index_root / version_id
    params = {
        "n_shards": config.n_shards,
        "shard_by": config.shard_by,
        "dense": _params_dict(config.dense),
    }
    if built_on is not None:
        params["built_on"] = built_on
    if snap.chunking is not None:
        params["chunking"] = snap.chunking
    with conn.transaction():
        indexes_repo.create_version(
            conn,
            version_id=version_id,
            path=str(path.resolve()),
            model=config.model_name,
            dim=dim,
            n_shards=config.n_shards,
            params=params,
        )
    started = time.monotonic()
    try:
        build_version(
            config.index_root,
            version_id,
            row_ids=snap.rows,
            doc_ids=snap.doc_ids,
            tenant_ids=snap.tenant_ids,
            texts=snap.texts,
            vectors=snap.vectors,
            n_shards=config.n_shards,
            shard_by=config.shard_by,  # type: ignore[arg-type]
            dense_params_for=auto_params(
                config.dense,
                flat_max=config.flat_max_vectors,
                ivfpq_min=config.ivfpq_min_vectors,
                force=config.force_kind,
            ),
            tokenizer=config.tokenizer,
            model_name=config.model_name,
            catalog_position=snap.position,
        )
    except Exception as exc:
        with conn.transaction():
            indexes_repo.mark_failed(conn, version_id=version_id, error=f"{type(exc).__name__}: {exc}")
        raise
    with conn.transaction():
        indexes_repo.mark_ready(
            conn, version_id=version_id, chunk_count=len(snap.rows), catalog_position=snap.position
        )
    log.info(
        "built index version %s: %d chunks in %.1fs",
        version_id,
        len(snap.rows),
        time.monotonic() - started,
    )
    return version_id


def _params_dict(p: DenseParams) -> dict[str, object]:
    return {f: getattr(p, f) for f in p.__dataclass_fields__}


def rebuild_on_ray(conninfo: str, config: RebuildConfig, *, version_id: str | None = None) -> str:
    """The same rebuild as a Ray task (one CPU), so it can run on a cluster node."""
    import ray

    task = ray.remote(num_cpus=1)(_rebuild_on_node)
    return str(ray.get(task.remote(conninfo, config, version_id)))


def _rebuild_on_node(conninfo: str, config: RebuildConfig, version_id: str | None) -> str:
    import ray

    node = str(ray.get_runtime_context().get_node_id())
    return rebuild(conninfo, config, version_id=version_id, built_on=node)


@dataclass(frozen=True, slots=True)
class RebuildAdvice:
    needed: bool
    reasons: tuple[str, ...]
    tombstone_ratio: dict[int, float]
    delta_chunks: int
    checks: tuple[str, ...]  # every comparison made, passed or not ("delta 3 chunks < 50000")


def rebuild_advice(
    conn: psycopg.Connection, *, alias: str, tombstone_ratio: float, delta_chunks: int, model: str
) -> RebuildAdvice:
    """Whether the alias's version has too many hidden vectors per shard or too big a delta."""
    target = indexes_repo.resolve_alias(conn, alias=alias)
    if target is None:
        count = maintenance_repo.embedding_stats(conn, model=model).vectors
        check = f"alias {alias} has no version; {count} stored vectors for {model}"
        return RebuildAdvice(count > 0, ("no index version yet",) if count else (), {}, count, (check,))
    manifest = read_manifest(Path(target.path))
    ratios: dict[int, float] = {}
    reasons, checks = [], []
    for number, entry in enumerate(manifest.shards):
        rows = np.load(Path(target.path) / entry.path / "row_ids.npy")
        dead = maintenance_repo.hidden_count(conn, rows=rows.tolist())
        ratios[number] = dead / max(1, len(rows))
        over = ratios[number] >= tombstone_ratio
        checks.append(
            f"shard {number} hidden {ratios[number]:.2f} {'>=' if over else '<'} {tombstone_ratio}"
            f" ({dead} of {len(rows)} vectors)"
        )
        if over:
            reasons.append(f"shard {number} tombstone ratio {ratios[number]:.2f} >= {tombstone_ratio}")
    delta = maintenance_repo.fresh_leaf_count(conn, after_position=target.catalog_position)
    checks.append(f"delta {delta} chunks {'>=' if delta >= delta_chunks else '<'} {delta_chunks}")
    if delta >= delta_chunks:
        reasons.append(f"delta holds {delta} chunks >= {delta_chunks}")
    return RebuildAdvice(bool(reasons), tuple(reasons), ratios, delta, tuple(checks))

"""What a serving node searches: the live index version, its fresh-writes delta, and the
catalog view that turns an ACL filter into per-position masks.

``ServingIndex`` is an immutable snapshot; a request takes one reference and runs on it
to the end (the response names its version and the embedding model its queries must use:
each version records its own model, and its delta holds that model's vectors). Catch-up
and version swaps build a new snapshot and replace the reference; the old one is freed
when its last request ends.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import psycopg

from catalog import changes as changes_repo
from catalog import indexes as indexes_repo
from catalog import serving as serving_repo
from catalog.documents import documents_by_id
from catalog.maintenance import repeatable_read
from index.builder import EVERYTHING, LoadedVersion, ShardSelection, load_version
from index.search_costs import costs_of
from index.tokenize import Tokenizer
from retrieve.catalog_view import CatalogView
from retrieve.delta import DeltaSegment

# Change kinds of a tenant's own settings, each kept cached per node until its next change:
# the fusion defaults (migration 111) and the reranker (migration 121).
SETTING_KINDS = frozenset({"fusion", "reranker"})

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServingIndex:
    version: LoadedVersion | None
    model: str  # the embedding model of the version (queries and the delta use it)
    dim: int
    position: int  # catalog position the version covers
    shard_doc_idx: tuple[np.ndarray, ...]
    shard_versions: tuple[np.ndarray, ...]
    # Every shard's sorted row ids, loaded in this process or memory-mapped (a lookup touches a
    # few pages): which chunks the version holds, for the delta and for explain.
    shard_rows: tuple[np.ndarray, ...] = field(repr=False)
    delta: DeltaSegment = field(repr=False)
    delta_doc_idx: np.ndarray = field(repr=False)

    @property
    def version_id(self) -> str:
        return self.version.version_id if self.version else "delta-only"

    def in_index(self, rows: np.ndarray) -> np.ndarray:
        found = np.zeros(len(rows), dtype=bool)
        for held in self.shard_rows:
            if len(held) and len(rows):
                at = np.searchsorted(held, rows).clip(0, len(held) - 1)
                found |= np.asarray(held[at]) == rows
        return found


@dataclass(frozen=True, slots=True)
class ShardStats:
    """One shard of the serving version: vectors held and how many of them are hidden now
    (document deleted or chunk superseded since the build, masked at query time)."""

    shard: int
    kind: str
    vectors: int
    hidden: int

    @property
    def hidden_fraction(self) -> float:
        return self.hidden / self.vectors if self.vectors else 0.0


class ServingState:
    """Holds the view and the current snapshot; all mutation happens under ``view.lock``."""

    def __init__(
        self,
        *,
        model_name: str,
        dim: int,
        tokenizer: Tokenizer,
        prepare_model: Callable[[str], None] | None = None,
        selection: ShardSelection = EVERYTHING,
        warm: Callable[[psycopg.Connection], None] | None = None,
    ) -> None:
        """``model_name``/``dim`` serve when no version is loaded (delta only);
        ``prepare_model`` loads a version's query embedder before the version serves;
        ``selection``: the shards of each version (and whether the delta) this process loads
        and searches (a shard server's group; none for an API that fans out);
        ``warm`` reads what the request path will read (``catalog.warm``) before a version
        serves, at start-up and on every swap (the index files need no warming: loading a
        version hashes every file, which leaves them in the page cache)."""
        self.view = CatalogView()
        self.selection = selection
        self.default_model = model_name
        self.dim = dim
        self.prepare_model = prepare_model
        self.warm = warm
        self.tokenizer = tokenizer
        self._current: ServingIndex | None = None
        self._swap_lock = threading.Lock()

    @property
    def current(self) -> ServingIndex:
        if self._current is None:
            raise RuntimeError("serving state not loaded")
        return self._current

    @property
    def loaded(self) -> bool:
        return self._current is not None

    @property
    def model_name(self) -> str:
        """The embedding model that answers now: the serving version's (its manifest's, so a
        migration changes it), the configured one only while no version is loaded (delta only).
        The one owner of "which model answered" (answers, audit, status, metrics)."""
        return self._current.model if self._current is not None else self.default_model

    def shard_stats(self) -> list[ShardStats]:
        """Per shard of the current version, from the in-memory view (no database read)."""
        snap = self.current
        shards = snap.version.shards if snap.version else ()
        with self.view.lock:
            live = self.view.live_documents()
            masks = [
                self.view.chunk_mask(live, d, v)
                for d, v in zip(snap.shard_doc_idx, snap.shard_versions, strict=True)
            ]
        return [
            ShardStats(shard.shard, str(shard.dense.kind), len(mask), len(mask) - int(np.count_nonzero(mask)))
            for shard, mask in zip(shards, masks, strict=True)
        ]

    def load(self, conn: psycopg.Connection, version_path: Path | None) -> None:
        """Initial load: every document, then the version (if any) and its delta."""
        with self.view.lock:
            with repeatable_read(conn):
                position = changes_repo.current_position(conn)
                for doc in serving_repo.all_documents(conn):
                    self.view.upsert(doc)
            self.view.position = position
            version = load_version(version_path, select=self.selection) if version_path else None
            if version is not None:
                _calibrate(version)
            if version is not None and self.prepare_model is not None:
                self.prepare_model(version.manifest.model_name)
            self._warm(conn)
            self._current = self._snapshot(conn, version)

    def _warm(self, conn: psycopg.Connection) -> None:
        """Warm the catalog for the request path; a failure serves cold, never stops a load."""
        if self.warm is None:
            return
        try:
            self.warm(conn)
            conn.commit()
        except Exception:
            conn.rollback()
            log.warning("warming the catalog for serving failed; serving cold", exc_info=True)

    def _snapshot(self, conn: psycopg.Connection, version: LoadedVersion | None) -> ServingIndex:
        """A snapshot for ``version``: positions of the loaded shards mapped to documents, and
        the delta since its build when this process serves it."""
        docs, vers = [], []
        for shard in version.shards if version else ():
            pos = serving_repo.chunk_positions(conn, rows=shard.row_ids)
            docs.append(self.view.doc_index(pos.doc_ids))
            vers.append(pos.versions)
        serve_delta = self.selection.delta
        built_at = version.manifest.catalog_position if version else 0
        changed = (
            [
                c.doc_id
                for c in changes_repo.changes_since(conn, position=built_at, limit=10_000_000)
                if c.doc_id is not None and c.seq <= self.view.position
            ]
            if serve_delta
            else []
        )
        model = version.manifest.model_name if version else self.default_model
        dim = version.manifest.dim if version else self.dim
        base = ServingIndex(
            version,
            model,
            dim,
            built_at,
            tuple(docs),
            tuple(vers),
            version.row_ids_by_shard() if version else (),
            DeltaSegment.empty(dim),
            np.zeros(0, np.int64),
        )
        return self._with_delta(conn, base, sorted(set(changed)))

    def _with_delta(self, conn: psycopg.Connection, snap: ServingIndex, doc_ids: list[int]) -> ServingIndex:
        if not doc_ids or not self.selection.delta:
            return snap
        fresh = serving_repo.live_leaf_chunks(conn, doc_ids=doc_ids, model=snap.model)
        rows = np.array([c.row for c in fresh], dtype=np.int64)
        new = [c for c, inside in zip(fresh, snap.in_index(rows), strict=True) if not inside]
        delta = snap.delta.replaced(doc_ids=doc_ids, fresh=new, tokenizer=self.tokenizer, dim=snap.dim)
        return replace(snap, delta=delta, delta_doc_idx=self.view.doc_index(delta.doc_ids))

    def catch_up(self, conn: psycopg.Connection) -> int:
        """Apply catalog changes since the view's position; returns how many were applied."""
        with self.view.lock:
            found = changes_repo.changes_since(conn, position=self.view.position)
            if not found:
                return 0
            doc_ids = sorted({c.doc_id for c in found if c.doc_id is not None})
            for doc in documents_by_id(conn, doc_ids=doc_ids):
                self.view.upsert(doc)
            versioned = sorted({c.doc_id for c in found if c.kind == "version" and c.doc_id is not None})
            self._current = self._with_delta(conn, self.current, versioned)
            for c in found:
                if c.kind in SETTING_KINDS:
                    self.view.setting_marks[c.tenant_id] = c.seq
            self.view.position = found[-1].seq
            conn.commit()
            return len(found)

    def swap_to(self, conn: psycopg.Connection, version_path: Path) -> str:
        """Load, verify and switch to another version; raises (and keeps the old) on failure."""
        with self._swap_lock:
            version = load_version(version_path, select=self.selection)
            _calibrate(version)  # before the lock, like the warming: the old version serves meanwhile
            if self.prepare_model is not None:  # two models may be loaded from here on
                self.prepare_model(version.manifest.model_name)
            self._warm(conn)  # before the lock: requests go on with the old version meanwhile
            with self.view.lock:
                self.catch_up(conn)
                snap = self._snapshot(conn, version)
                self._current = snap
                conn.commit()
            log.info("now serving index version %s", version.version_id)
            return version.version_id


def _calibrate(version: LoadedVersion) -> None:
    """Time each loaded shard's search paths now, so the planner's first query does not."""
    for shard in version.shards:
        costs_of(shard.dense)


def alias_target(conn: psycopg.Connection, alias: str) -> tuple[str, Path] | None:
    row = indexes_repo.resolve_alias(conn, alias=alias)
    return (row.version_id, Path(row.path)) if row else None

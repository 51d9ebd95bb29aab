"""The fresh-writes segment: chunks committed after the loaded index version was built.

Small and in memory: exact dense search over its vectors and a BM25 index rebuilt when it
changes. It is immutable; a refresh builds a new one and the service swaps the reference,
so a request keeps the segment it started with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from catalog.serving import FreshChunk
from index.bm25_shards import LexicalShard
from index.tokenize import Tokenizer


def lexical_text(text: str, section_path: Sequence[str]) -> str:
    """What BM25 indexes: the heading path as context, then the chunk (as the embedder sees it)."""
    return (" > ".join(section_path) + "\n" + text) if section_path else text


@dataclass(frozen=True, slots=True)
class DeltaSegment:
    rows: np.ndarray
    doc_ids: np.ndarray
    versions: np.ndarray
    vectors: np.ndarray = field(repr=False)
    texts: tuple[str, ...] = field(repr=False)
    lexical: LexicalShard | None = field(repr=False)

    @property
    def size(self) -> int:
        return len(self.rows)

    @classmethod
    def empty(cls, dim: int) -> DeltaSegment:
        return cls(
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
            np.zeros(0, np.int32),
            np.zeros((0, dim), np.float32),
            (),
            None,
        )

    def replaced(
        self, *, doc_ids: Sequence[int], fresh: Sequence[FreshChunk], tokenizer: Tokenizer, dim: int
    ) -> DeltaSegment:
        """A new segment: the given documents' old entries dropped, their fresh chunks added."""
        drop = np.isin(self.doc_ids, np.asarray(list(doc_ids), dtype=np.int64))
        keep = ~drop
        usable = [c for c in fresh if c.vector is not None and len(c.vector) == dim]
        vecs: list[np.ndarray] = [c.vector for c in usable if c.vector is not None]
        rows = np.concatenate([self.rows[keep], np.array([c.row for c in usable], dtype=np.int64)])
        docs = np.concatenate([self.doc_ids[keep], np.array([c.doc_id for c in usable], dtype=np.int64)])
        versions = np.concatenate(
            [self.versions[keep], np.array([c.version for c in usable], dtype=np.int32)]
        )
        new_vecs = np.stack(vecs).astype(np.float32) if usable else np.zeros((0, dim), np.float32)
        vectors = np.concatenate([self.vectors[keep], new_vecs])
        texts = tuple(t for t, k in zip(self.texts, keep, strict=True) if k) + tuple(
            lexical_text(c.text, c.section_path) for c in usable
        )
        lexical = LexicalShard.build(list(texts), rows, tokenizer) if len(rows) else None
        return DeltaSegment(rows, docs, versions, vectors, texts, lexical)

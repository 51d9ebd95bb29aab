"""Lexical (BM25) shards over bm25s.

Serving uses bm25s ``method="lucene"`` (idf = ln(1 + (N - df + 0.5) / (df + 0.5)), always
positive): small segments such as a fresh-writes delta of a few documents hold terms that
occur in most of their documents, and a Robertson idf would score those 0 and make fresh
documents unfindable by keyword. Apart from the idf, the two variants are the same formula.

Oracle variant (tests): bm25s ``method="robertson"``, i.e. idf = ln((N - df + 0.5) / (df + 0.5))
and tf part = tf / (tf + k1 * (1 - b + b * dl / avgdl)). That is rank_bm25's ``BM25Okapi``
divided by the constant (k1 + 1), so rankings agree exactly, which lets the tests use
rank_bm25 as an oracle. The one difference: a term in more than half of the documents has a
negative Robertson idf; bm25s clamps it to 0 where BM25Okapi floors it at
epsilon * mean idf. With stop words removed such terms are rare; a document matched only by
them scores 0 and, like every zero-score filler, is not returned.

bm25s precomputes every (term, document) score into a CSC matrix, so a query is a sum of
the posting slices of its terms: ~1-5 ms over 100k short documents.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bm25s
import numpy as np

from core.errors import IndexIntegrityError, InvalidInputError
from index.tokenize import Tokenizer

logger = logging.getLogger(__name__)
# bm25s sets its own logger to DEBUG on import; its per-build messages are noise here.
logging.getLogger("bm25s").setLevel(logging.WARNING)

BM25_METHOD = "lucene"
META_FILE = "lexical.json"
ROW_IDS_FILE = "row_ids.npy"


class LexicalShard:
    """BM25 over the texts of one shard; positions line up with the dense shard's."""

    def __init__(
        self,
        bm25: Any | None,
        row_ids: np.ndarray,
        tokenizer: Tokenizer,
        *,
        k1: float,
        b: float,
        method: str = BM25_METHOD,
    ) -> None:
        # bm25 is None when no document has a single token: every search returns nothing.
        self._bm25 = bm25
        self.row_ids = row_ids
        self.tokenizer = tokenizer
        self.k1 = k1
        self.b = b
        self.method = method

    @property
    def ntotal(self) -> int:
        return len(self.row_ids)

    @property
    def vocab_size(self) -> int:
        return 0 if self._bm25 is None else len(self._bm25.vocab_dict)

    @classmethod
    def build(
        cls,
        texts: Sequence[str],
        row_ids: np.ndarray,
        tokenizer_config: Tokenizer,
        k1: float = 0.9,
        b: float = 0.4,
        method: str = BM25_METHOD,
    ) -> LexicalShard:
        """Tokenize and index ``texts``; position i is ``texts[i]`` / ``row_ids[i]``.

        Args:
            texts: one text per chunk; may be empty.
            row_ids: (n,) int64 catalog row ids.
            tokenizer_config: the tokenizer, stored with the shard for queries.
            k1: BM25 term-frequency saturation (0.9 is Anserini's default).
            b: BM25 length normalisation.
            method: bm25s scoring variant ("lucene" to serve, "robertson" to match rank_bm25).

        Returns:
            The built shard.
        """
        row_ids = np.ascontiguousarray(row_ids, dtype=np.int64)
        if row_ids.shape != (len(texts),):
            raise InvalidInputError(f"row_ids must be ({len(texts)},), got {row_ids.shape}")
        corpus = [tokenizer_config.tokenize(text) for text in texts]
        bm25 = None
        if any(corpus):
            bm25 = bm25s.BM25(k1=k1, b=b, method=method)
            bm25.index(corpus, show_progress=False)
        return cls(bm25, row_ids, tokenizer_config, k1=k1, b=b, method=method)

    def search(self, query: str, k: int, *, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k BM25 search restricted to allowed positions.

        Args:
            query: raw query text, tokenized with the shard's tokenizer; unknown terms are ignored.
            k: most results returned.
            allowed: bool mask over positions; None allows all.

        Returns:
            float32 scores and int64 positions, at most k, best first, every score > 0 and
            every position allowed.
        """
        if k < 1:
            raise InvalidInputError(f"k must be >= 1, got {k}")
        if allowed is not None:
            allowed = np.asarray(allowed, dtype=bool)
            if allowed.shape != (self.ntotal,):
                raise InvalidInputError(f"allowed must be ({self.ntotal},) bool, got {allowed.shape}")
        empty = (np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64))
        if self._bm25 is None:
            return empty
        token_ids = self._bm25.get_tokens_ids(self.tokenizer.tokenize(query))
        if not token_ids:
            return empty
        scores = self._bm25.get_scores_from_ids(token_ids)
        # Only documents sharing a term have a score; the mask is checked on those alone.
        candidates = np.flatnonzero(scores > 0)
        if allowed is not None:
            candidates = candidates[allowed[candidates]]
        cand_scores = scores[candidates]
        if len(candidates) > k:
            top = np.argpartition(-cand_scores, k - 1)[:k]
            candidates, cand_scores = candidates[top], cand_scores[top]
        order = np.argsort(-cand_scores, kind="stable")
        return cand_scores[order].astype(np.float32), candidates[order].astype(np.int64)

    def save(self, directory: Path) -> None:
        """Write the bm25s index files, ``row_ids.npy`` and ``lexical.json`` to ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        if self._bm25 is not None:
            self._bm25.save(str(directory))
        np.save(directory / ROW_IDS_FILE, np.asarray(self.row_ids, dtype=np.int64))
        meta = {
            "tokenizer": self.tokenizer.config(),
            "k1": self.k1,
            "b": self.b,
            "method": self.method,
            "n_docs": self.ntotal,
            "has_bm25": self._bm25 is not None,
        }
        (directory / META_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")

    @classmethod
    def load(cls, directory: Path, mmap: bool = True) -> LexicalShard:
        """Load a saved shard; the score matrix and row ids are memory-mapped when ``mmap``.

        Raises:
            IndexIntegrityError: when a file is missing, unreadable or inconsistent.
        """
        try:
            meta = json.loads((directory / META_FILE).read_text(encoding="utf-8"))
            row_ids = np.load(directory / ROW_IDS_FILE, mmap_mode="r" if mmap else None)
            bm25 = bm25s.BM25.load(str(directory), mmap=mmap) if meta["has_bm25"] else None
            tokenizer = Tokenizer.from_config(meta["tokenizer"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise IndexIntegrityError(f"cannot load lexical shard {directory}: {exc}") from exc
        n_bm25 = len(row_ids) if bm25 is None else int(bm25.scores["num_docs"])
        if not (len(row_ids) == meta["n_docs"] == n_bm25):
            raise IndexIntegrityError(
                f"lexical shard {directory}: row_ids.npy has {len(row_ids)} rows, "
                f"lexical.json {meta['n_docs']}, bm25 {n_bm25}"
            )
        return cls(
            bm25,
            row_ids,
            tokenizer,
            k1=float(meta["k1"]),
            b=float(meta["b"]),
            method=str(meta.get("method", BM25_METHOD)),
        )

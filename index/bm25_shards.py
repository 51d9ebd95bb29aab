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

Collection statistics across segments: each segment's precomputed scores use its own
document frequencies and average length, so the same document would score differently in a
shard of 100k documents and in a delta of three. ``search(..., stats=)`` rescores the
query's postings with statistics summed over every segment (``LexicalStats.total`` of each
segment's ``stats(query, within=)``, as distributed engines' DFS phase does; serving counts
only the caller's tenant's visible chunks, so no tenant's text moves another's scores): a posting's term
frequency is recovered exactly from its local score (tf = r K / (1 - r), r = score / idf,
K = k1 (1 - b + b dl / avgdl)) using the document lengths stored with the shard, and scored
again with the global idf and average length. The per-shard df table is computed once at
load; a query only sums the df of its own terms.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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
DOC_LENGTHS_FILE = "doc_lengths.npy"


@dataclass(frozen=True, slots=True)
class LexicalStats:
    """Collection statistics for one query's terms: documents, total length, df per term."""

    n_docs: int
    total_length: int
    df: Mapping[str, int] = field(default_factory=dict)

    @property
    def avgdl(self) -> float:
        return self.total_length / self.n_docs if self.n_docs else 0.0

    @staticmethod
    def total(parts: Iterable[LexicalStats]) -> LexicalStats:
        n, length = 0, 0
        df: dict[str, int] = {}
        for part in parts:
            n += part.n_docs
            length += part.total_length
            for term, count in part.df.items():
                df[term] = df.get(term, 0) + count
        return LexicalStats(n, length, df)


def _idf(method: str, df: np.ndarray | float, n_docs: float) -> np.ndarray:
    """bm25s's idf of ``method``: Lucene's (always positive) or Robertson's (clamped at 0)."""
    df = np.asarray(df, dtype=np.float64)
    if method == "lucene":
        return np.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
    if method == "robertson":
        return np.maximum(0.0, np.log((n_docs - df + 0.5) / (df + 0.5)))
    raise InvalidInputError(f"shared collection statistics support lucene and robertson, not {method}")


_EMPTY = (np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64))


def _top_allowed(scores: np.ndarray, k: int, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best positions scoring > 0 and allowed, best first (ties by position)."""
    # Only documents sharing a term have a score; the mask is checked on those alone.
    candidates = np.flatnonzero(scores > 0)
    if allowed is not None:
        candidates = candidates[np.asarray(allowed, dtype=bool)[candidates]]
    cand_scores = scores[candidates]
    if len(candidates) > k:
        top = np.argpartition(-cand_scores, k - 1)[:k]
        candidates, cand_scores = candidates[top], cand_scores[top]
    order = np.argsort(-cand_scores, kind="stable")
    return cand_scores[order].astype(np.float32), candidates[order].astype(np.int64)


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
        doc_lengths: np.ndarray | None = None,
    ) -> None:
        # bm25 is None when no document has a single token: every search returns nothing.
        self._bm25 = bm25
        self.row_ids = row_ids
        self.tokenizer = tokenizer
        self.k1 = k1
        self.b = b
        self.method = method
        # Tokens per document as bm25s counted them; None for shards saved before they were
        # stored (those rescale by idf only and count no length in the shared statistics).
        self.doc_lengths = doc_lengths
        self._total_length = int(np.sum(doc_lengths, dtype=np.int64)) if doc_lengths is not None else 0
        # Per document, computed once: its length and the local length norm k1 (1 - b + b dl / avgdl).
        self._dl = np.asarray(doc_lengths, dtype=np.float32) if doc_lengths is not None else None
        local_avg = self._total_length / len(row_ids) if len(row_ids) else 0.0
        self._norm = (
            (k1 * (1 - b + b * self._dl / local_avg)).astype(np.float32)
            if self._dl is not None and local_avg > 0
            else None
        )
        # Document frequency per vocabulary id: the posting lengths, computed once at load.
        self._df = np.diff(np.asarray(bm25.scores["indptr"])) if bm25 is not None else np.zeros(0, np.int64)
        # The score matrix as plain ndarray views of bm25s's (memory-mapped) arrays: a slice of
        # a np.memmap builds a memmap object each time (0.55 -> 0.51 ms per query, docs/benchmarks.md).
        self._csc: tuple[np.ndarray, np.ndarray, np.ndarray] | None = (
            tuple(np.asarray(bm25.scores[key]) for key in ("data", "indices", "indptr"))  # type: ignore[assignment]
            if bm25 is not None
            else None
        )

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
        lengths = np.array([len(tokens) for tokens in corpus], dtype=np.int32)
        return cls(bm25, row_ids, tokenizer_config, k1=k1, b=b, method=method, doc_lengths=lengths)

    def stats(
        self, query: str, *, within: np.ndarray | None = None, language: str | None = None
    ) -> LexicalStats:
        """This segment's share of the collection statistics for ``query``'s terms, over the
        positions of ``within`` (a bool mask: one tenant's chunks) or all of them.

        With a mask, a term's df counts only its postings inside the mask (every term of the
        vocabulary gets an entry, 0 included, so no caller falls back to the segment's df),
        and the length counts only the masked documents."""
        return self.term_stats(self.tokenizer.tokenize(query, language), within=within)

    def term_stats(self, terms: Iterable[str], *, within: np.ndarray | None = None) -> LexicalStats:
        """:meth:`stats` for terms already analysed (index terms, as :meth:`search_terms` takes)."""
        if within is None:
            n_docs, length = self.ntotal, self._total_length
        else:
            within = np.asarray(within, dtype=bool)
            if within.shape != (self.ntotal,):
                raise InvalidInputError(f"within must be ({self.ntotal},) bool, got {within.shape}")
            n_docs = int(np.count_nonzero(within))
            length = int(np.sum(self._dl[within], dtype=np.int64)) if self._dl is not None else 0
        df: dict[str, int] = {}
        if self._bm25 is not None:
            vocab = self._bm25.vocab_dict
            assert self._csc is not None
            _, indices, indptr = self._csc
            for term in set(terms):
                token_id = vocab.get(term)
                if token_id is None:
                    continue
                if within is None:
                    df[term] = int(self._df[token_id])
                else:
                    postings = indices[int(indptr[token_id]) : int(indptr[token_id + 1])]
                    df[term] = int(np.count_nonzero(within[postings]))
        return LexicalStats(n_docs, length, df)

    def search(
        self,
        query: str,
        k: int,
        *,
        allowed: np.ndarray | None,
        stats: LexicalStats | None = None,
        language: str | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k BM25 search restricted to allowed positions.

        Args:
            query: raw query text, tokenized with the shard's tokenizer; unknown terms are ignored.
            k: most results returned.
            allowed: bool mask over positions; None allows all.
            stats: collection statistics of every segment searched together (see the module
                docstring); None scores with this shard's own.

        Returns:
            float32 scores and int64 positions, at most k, best first, every score > 0 and
            every position allowed.
        """
        self._check(k, allowed)
        if self._bm25 is None:
            return _EMPTY
        terms = [t for t in self.tokenizer.tokenize(query, language) if t in self._bm25.vocab_dict]
        token_ids = [self._bm25.vocab_dict[t] for t in terms]
        if not token_ids:
            return _EMPTY
        if stats is None:
            scores = self._bm25.get_scores_from_ids(token_ids)
        else:
            scores = self._shared_scores(terms, token_ids, stats)
        return _top_allowed(scores, k, allowed)

    def search_terms(
        self,
        weights: Mapping[str, float],
        k: int,
        *,
        allowed: np.ndarray | None,
        stats: LexicalStats | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search` for a weighted query of index terms (an expanded query model such as
        :func:`retrieve.feedback.rm3_query`'s): ``score(d) = sum_t w_t * bm25(t, d)``, each
        term's BM25 as :meth:`search` scores it, so weights equal to a query's term counts
        give :meth:`search`'s scores. Terms are not analysed again; unknown terms and weights
        <= 0 are ignored."""
        self._check(k, allowed)
        if self._bm25 is None:
            return _EMPTY
        vocab = self._bm25.vocab_dict
        kept = [(t, float(w)) for t, w in weights.items() if t in vocab and w > 0]
        if not kept:
            return _EMPTY
        scores = np.zeros(self.ntotal, dtype=np.float32)
        for term, weight in kept:
            ids = [vocab[term]]
            one = (
                self._bm25.get_scores_from_ids(ids)
                if stats is None
                else self._shared_scores([term], ids, stats)
            )
            scores += np.float32(weight) * np.asarray(one, dtype=np.float32)
        return _top_allowed(scores, k, allowed)

    def _check(self, k: int, allowed: np.ndarray | None) -> None:
        if k < 1:
            raise InvalidInputError(f"k must be >= 1, got {k}")
        if allowed is not None and np.shape(allowed) != (self.ntotal,):
            raise InvalidInputError(f"allowed must be ({self.ntotal},) bool, got {np.shape(allowed)}")

    def _shared_scores(self, terms: list[str], token_ids: list[int], stats: LexicalStats) -> np.ndarray:
        """Scores of every position under ``stats``: each posting's tf recovered, rescored."""
        assert self._csc is not None
        data, indices, indptr = self._csc
        scores = np.zeros(self.ntotal, dtype=np.float32)
        # The global length norm is a + c * dl; the local one is precomputed per document.
        a = np.float32(self.k1 * (1 - self.b))
        c = np.float32(self.k1 * self.b / stats.avgdl) if stats.avgdl > 0 else np.float32(0)
        for term, token_id in zip(terms, token_ids, strict=True):
            start, end = int(indptr[token_id]), int(indptr[token_id + 1])
            if start == end:
                continue
            docs = indices[start:end]
            local = data[start:end]
            idf_local = float(_idf(self.method, end - start, self.ntotal))
            idf_global = float(_idf(self.method, stats.df.get(term, end - start), max(stats.n_docs, 1)))
            if self._norm is None or self._dl is None or idf_local <= 0 or stats.avgdl <= 0:
                scores[docs] += local * np.float32(idf_global / idf_local if idf_local > 0 else 0.0)
                continue
            # r = tf / (tf + norm)  =>  tf = r * norm / (1 - r), exact after rounding.
            ratio = np.minimum(local * np.float32(1.0 / idf_local), np.float32(1.0 - 1e-6))
            tf = np.rint(ratio * self._norm[docs] / (1 - ratio))
            scores[docs] += np.float32(idf_global) * tf / (tf + a + c * self._dl[docs])
        return scores

    def save(self, directory: Path) -> None:
        """Write the bm25s index files, ``row_ids.npy`` and ``lexical.json`` to ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        if self._bm25 is not None:
            self._bm25.save(str(directory))
        np.save(directory / ROW_IDS_FILE, np.asarray(self.row_ids, dtype=np.int64))
        if self.doc_lengths is not None:
            np.save(directory / DOC_LENGTHS_FILE, np.asarray(self.doc_lengths, dtype=np.int32))
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
            lengths_path = directory / DOC_LENGTHS_FILE
            lengths = (
                np.load(lengths_path, mmap_mode="r" if mmap else None) if lengths_path.exists() else None
            )
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
            doc_lengths=lengths,
        )

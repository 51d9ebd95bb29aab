"""Cross-encoder scoring shared by every backend: the seams, truncation and token-capped batches.

:class:`BatchedCrossEncoder` is the base of both backends (``rerank.torch_backend`` and
``rerank.onnx_backend``), so they see the same inputs; ``rerank.cross_encoder`` picks one.
"""

from __future__ import annotations

import copy
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from core.errors import ConfigError

# Each word piece covers at least one character and words average ~4-6 characters, so cutting
# a passage at this many characters per allowed token never changes what the model sees but
# keeps tokenizing a 1 MB passage from costing more than scoring it.
_CHARS_PER_TOKEN_CUT = 16
# [CLS] query [SEP] passage [SEP]
_PAIR_SPECIAL_TOKENS = 3

Pair = tuple[str, str]


@runtime_checkable
class Reranker(Protocol):
    """Scores passages against a query; higher is more relevant."""

    @property
    def max_length(self) -> int: ...

    def score(self, query: str, passages: Sequence[str]) -> list[float]: ...


class PairScorer(Protocol):
    """What :class:`rerank.batching.BatchingReranker` needs: scoring pairs of mixed queries."""

    @property
    def max_length(self) -> int: ...

    def pair_tokens(self, pairs: Sequence[Pair]) -> list[int]: ...

    def score_pairs(self, pairs: Sequence[Pair]) -> list[float]: ...


def token_batches(lengths: Sequence[int], *, max_batch_tokens: int, max_batch_pairs: int) -> list[list[int]]:
    """Group item indices into batches whose padded size stays under a token cap.

    Items are sorted longest first so each batch pads to similar lengths; a batch costs
    ``len(batch) * longest item`` tokens, which is what the padded tensor really holds.
    An item longer than the cap on its own still gets a batch of one.

    Args:
        lengths: token count of each item.
        max_batch_tokens: cap on ``len(batch) * max(lengths in batch)``.
        max_batch_pairs: cap on the number of items in a batch.

    Returns:
        Lists of indices into ``lengths``; every index appears exactly once.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for idx in order:
        # Sorted descending, so the first item of the batch is its longest.
        longest = lengths[current[0]] if current else lengths[idx]
        if current and ((len(current) + 1) * longest > max_batch_tokens or len(current) >= max_batch_pairs):
            batches.append(current)
            current = []
        current.append(idx)
    if current:
        batches.append(current)
    return batches


class BatchedCrossEncoder(ABC):
    """A :class:`PairScorer` and :class:`Reranker` whose backend scores one padded batch.

    Shared by both backends, so they see the same inputs: each text is cut to a length that
    cannot change its tokens, pairs are counted after truncation to ``max_length``, and
    grouped into batches whose padded size is capped in tokens. Scores are the model's raw
    logits (no sigmoid), so they keep their resolution at the extremes; only their order is
    meaningful across models.
    """

    def __init__(self, tokenizer: Any, *, max_batch_tokens: int, max_batch_pairs: int) -> None:
        if max_batch_tokens < 1 or max_batch_pairs < 1:
            raise ConfigError("max_batch_tokens and max_batch_pairs must be positive")
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_pairs = max_batch_pairs
        # Fast tokenizers raise "Already borrowed" when two threads use one concurrently, so
        # callers count tokens with their own copy while the scoring thread uses the model's.
        self._count_tokenizer = copy.deepcopy(tokenizer)
        self._count_lock = threading.Lock()
        # One forward pass at a time: on a few CPU cores concurrent passes only thrash.
        self._model_lock = threading.Lock()

    @classmethod
    @abstractmethod
    def load(
        cls,
        source: str,
        *,
        device: str,
        max_length: int | None,
        max_batch_tokens: int,
        max_batch_pairs: int,
        data_dir: Path | None,
        threads: int | None,
    ) -> BatchedCrossEncoder:
        """Load from a model folder or hub name; what ``rerank.cross_encoder.BACKENDS`` calls.

        See :func:`rerank.cross_encoder.load_reranker` for the arguments.
        """

    @property
    @abstractmethod
    def max_length(self) -> int: ...

    @property
    @abstractmethod
    def device(self) -> str: ...

    @abstractmethod
    def _forward(self, pairs: list[Pair]) -> list[float]:
        """Raw logits for one batch, truncated longest-first to ``max_length``; under the model lock."""

    def _cut(self, text: str) -> str:
        limit = self.max_length * _CHARS_PER_TOKEN_CUT
        return text if len(text) <= limit else text[:limit]

    def pair_tokens(self, pairs: Sequence[Pair]) -> list[int]:
        """Tokens each pair occupies in the model input, after truncation to ``max_length``."""
        if not pairs:
            return []
        # Capping each side at max_length keeps the count exact and the tokenizer quiet.
        cap = {"add_special_tokens": False, "truncation": True, "max_length": self.max_length}
        with self._count_lock:
            queries = self._count_tokenizer([self._cut(q) for q, _ in pairs], **cap)["input_ids"]
            passages = self._count_tokenizer([self._cut(p) for _, p in pairs], **cap)["input_ids"]
        return [
            min(self.max_length, len(q) + len(p) + _PAIR_SPECIAL_TOKENS)
            for q, p in zip(queries, passages, strict=True)
        ]

    def score_pairs(self, pairs: Sequence[Pair]) -> list[float]:
        """Score (query, passage) pairs; results follow the input order.

        Args:
            pairs: pairs of possibly different queries.

        Returns:
            One raw logit per pair.
        """
        if not pairs:
            return []
        cut = [(self._cut(q), self._cut(p)) for q, p in pairs]
        lengths = self.pair_tokens(cut)
        scores = [0.0] * len(cut)
        for batch in token_batches(
            lengths, max_batch_tokens=self.max_batch_tokens, max_batch_pairs=self.max_batch_pairs
        ):
            with self._model_lock:
                values = self._forward([cut[i] for i in batch])
            for i, value in zip(batch, values, strict=True):
                scores[i] = float(value)
        return scores

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """Score passages against one query, in the order given.

        Args:
            query: the search query.
            passages: candidate texts; truncated to the model's maximum length.

        Returns:
            One score per passage; higher is more relevant.
        """
        return self.score_pairs([(query, passage) for passage in passages])

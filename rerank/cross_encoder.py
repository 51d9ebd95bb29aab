"""Cross-encoder reranking: score (query, passage) pairs with a sentence-transformers CrossEncoder.

The model is loaded by path or hub name (offline machines can only load local folders, e.g.
one written by :func:`rerank.training.train_reranker`). Pairs are truncated to the model's
maximum length and scored in batches whose padded size is capped in tokens, so one request
with long passages cannot blow up memory or latency. Two backends share that logic
(:class:`BatchedCrossEncoder`): PyTorch (:class:`CrossEncoderReranker`) and ONNX Runtime on
an export of the same model (``rerank.onnx_backend.OnnxCrossEncoderReranker``).
"""

from __future__ import annotations

import copy
import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args, runtime_checkable

from core.errors import ConfigError

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

logger = logging.getLogger(__name__)

_INSTALL_HINT = "reranking needs sentence-transformers and torch: pip install 'sentence-transformers>=3.0'"
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


def resolve_device(device: str) -> str:
    """Map ``"auto"`` to ``"cuda"`` when a GPU is visible, else ``"cpu"``; pass others through."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


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


class CrossEncoderReranker(BatchedCrossEncoder):
    """The PyTorch backend: a loaded sentence-transformers ``CrossEncoder``."""

    def __init__(self, model: CrossEncoder, *, max_batch_tokens: int = 8192, max_batch_pairs: int = 128):
        super().__init__(model.tokenizer, max_batch_tokens=max_batch_tokens, max_batch_pairs=max_batch_pairs)
        self._model = model

    @property
    def model(self) -> CrossEncoder:
        return self._model

    @property
    def max_length(self) -> int:
        # A model without a configured limit still cannot take more than its positions.
        limit = self._model.max_seq_length
        return int(limit) if limit is not None else 512

    @property
    def device(self) -> str:
        return str(self._model.device)

    def _forward(self, pairs: list[Pair]) -> list[float]:
        import torch

        # The tokenizer truncates (longest_first) to the model's max_length.
        out = self._model.predict(
            pairs,
            batch_size=len(pairs),
            show_progress_bar=False,
            activation_fn=torch.nn.Identity(),
            convert_to_tensor=True,
        )
        return [float(v) for v in out.float().cpu().tolist()]


def _looks_like_path(name_or_path: str) -> bool:
    # Hub ids are "name" or "org/name"; anything else with a separator is meant as a folder.
    return (
        name_or_path.startswith((".", "~", os.sep))
        or name_or_path.count("/") > 1
        or (os.altsep is not None and os.altsep in name_or_path)
    )


Backend = Literal["auto", "torch", "onnx"]


def resolve_backend(backend: str, *, device: str, data_dir: Path | None) -> Literal["torch", "onnx"]:
    """The backend ``load_reranker`` will use; ``auto`` is ONNX on CPU when it can be exported.

    ``auto`` picks ONNX when the device resolves to CPU, a ``data_dir`` for the export cache
    is given and both ``onnxruntime`` and ``onnx`` import; PyTorch otherwise.
    """
    if backend not in get_args(Backend):
        raise ConfigError(f"unknown reranker backend {backend!r}; choose one of {get_args(Backend)}")
    if backend != "auto":
        return "onnx" if backend == "onnx" else "torch"
    from index.onnx_export import exporter_available

    if data_dir is None or resolve_device(device) != "cpu" or not exporter_available():
        return "torch"
    return "onnx"


def load_reranker(
    name_or_path: str,
    *,
    device: str = "auto",
    max_length: int | None = None,
    max_batch_tokens: int = 8192,
    max_batch_pairs: int = 128,
    backend: Backend = "torch",
    data_dir: Path | None = None,
    threads: int | None = None,
) -> BatchedCrossEncoder:
    """Load a sentence-transformers CrossEncoder by local path or hub name, on the chosen backend.

    Args:
        name_or_path: a CrossEncoder folder (e.g. written by ``train_reranker``) or a hub id.
        device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``;
            the ONNX backend runs on CPU only.
        max_length: cap on tokens per pair; defaults to the model's own maximum.
        max_batch_tokens: cap on padded tokens per forward pass.
        max_batch_pairs: cap on pairs per forward pass.
        backend: ``torch``, ``onnx`` (onnxruntime, the ``.[onnx]`` extra) or ``auto``
            (see :func:`resolve_backend`); an ``auto`` ONNX export that fails falls back
            to PyTorch with a warning.
        data_dir: the ONNX export is cached in ``<data_dir>/models/<name>-rerank-onnx``.
        threads: the ONNX session's intra-op threads (default 1). PyTorch's thread count
            is process-wide and shared with the embedder, so it is left alone.

    Returns:
        The reranker, ready to score.

    Raises:
        ConfigError: the folder does not exist, the model cannot be loaded or exported from
            it, or ``backend="onnx"`` without ``data_dir`` or onnxruntime.
    """
    path = Path(name_or_path).expanduser()
    if not path.exists() and _looks_like_path(name_or_path):
        raise ConfigError(f"reranker model folder not found: {name_or_path}")
    source = str(path) if path.exists() else name_or_path
    chosen = resolve_backend(backend, device=device, data_dir=data_dir)
    batching = {"max_batch_tokens": max_batch_tokens, "max_batch_pairs": max_batch_pairs}
    reranker: BatchedCrossEncoder
    if chosen == "onnx":
        if data_dir is None:
            raise ConfigError("the onnx reranker backend needs data_dir for its export cache")
        if resolve_device(device) != "cpu":
            logger.warning("the onnx reranker backend runs on CPU; device %r ignored", device)
        from rerank.onnx_backend import load_onnx_reranker

        try:
            reranker = load_onnx_reranker(
                source, data_dir=data_dir, max_length=max_length, threads=threads, **batching
            )
        except Exception:  # an export can fail in many ways; "auto" means "PyTorch will do"
            if backend == "onnx":
                raise
            logger.warning("ONNX reranker backend unavailable; using PyTorch", exc_info=True)
            chosen = "torch"
    if chosen == "torch":
        reranker = CrossEncoderReranker(
            load_cross_encoder(source, device=device, max_length=max_length), **batching
        )
    logger.info(
        "loaded reranker",
        extra={
            "model": name_or_path,
            "backend": chosen,
            "device": reranker.device,
            "max_length": reranker.max_length,
        },
    )
    return reranker


def load_cross_encoder(source: str, *, device: str, max_length: int | None = None) -> CrossEncoder:
    """The sentence-transformers model, with a single label; ConfigError when it cannot load."""
    try:
        from sentence_transformers import CrossEncoder
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError(_INSTALL_HINT) from exc

    kwargs: dict[str, Any] = {"device": resolve_device(device)}
    if max_length is not None:
        kwargs["max_length"] = max_length
    try:
        model = CrossEncoder(source, **kwargs)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"could not load reranker {source!r} (offline machines need a local folder): {exc}"
        ) from exc
    if model.num_labels != 1:
        raise ConfigError(f"reranker {source!r} has {model.num_labels} labels; a reranker needs 1")
    return model

"""The PyTorch reranker backend: a sentence-transformers ``CrossEncoder``.

The model is loaded by path or hub name (offline machines can only load local folders, e.g.
one written by :func:`rerank.training.train_reranker`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.backends import resolve_device
from core.errors import ConfigError
from rerank.scoring import BatchedCrossEncoder, Pair

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

_INSTALL_HINT = "reranking needs sentence-transformers and torch: pip install 'sentence-transformers>=3.0'"


class CrossEncoderReranker(BatchedCrossEncoder):
    """The PyTorch backend: a loaded sentence-transformers ``CrossEncoder``."""

    def __init__(self, model: CrossEncoder, *, max_batch_tokens: int = 8192, max_batch_pairs: int = 128):
        super().__init__(model.tokenizer, max_batch_tokens=max_batch_tokens, max_batch_pairs=max_batch_pairs)
        self._model = model

    @classmethod
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
    ) -> CrossEncoderReranker:
        """``data_dir`` is unused; PyTorch's thread count is process-wide and shared with the
        embedder, so ``threads`` is left alone."""
        model = load_cross_encoder(source, device=device, max_length=max_length)
        return cls(model, max_batch_tokens=max_batch_tokens, max_batch_pairs=max_batch_pairs)

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

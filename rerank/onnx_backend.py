"""The cross-encoder run by ONNX Runtime on CPU: exported once per model, verified, cached.

The export reuses ``index.onnx_export``'s building blocks (the TorchScript exporter with
eager attention, onnxruntime's BERT fusions, fingerprinted cache folders published
atomically), so the run-time side needs only ``onnxruntime`` and the tokenizer saved next
to the graph. Layout of an export folder (``<data_dir>/models/<name>-rerank-onnx/``)::

    model.onnx        logits (batch, 1) for (input_ids, attention_mask[, token_type_ids])
    tokenizer files   saved from the source model, so loading needs no source folder
    meta.json         source fingerprint, max_length, input names, verified max |logit diff|

An export is published only when, on every probe pair (short, unicode, and pairs past
``max_length`` on either side), its logit is within ``MAX_LOGIT_DIFF`` of PyTorch's, both
scored through the same truncation and batching code (:class:`BatchedCrossEncoder`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.backends import require_exporter, resolve_device
from core.errors import ConfigError
from core.onnx_runtime import cpu_session
from index.onnx_export import (
    MODEL_FILE,
    export_transformer,
    onnx_cache_dir,
    publish_export,
    read_meta,
    source_fingerprint,
)
from rerank.scoring import BatchedCrossEncoder, Pair
from rerank.torch_backend import CrossEncoderReranker, load_cross_encoder

log = logging.getLogger(__name__)

FORMAT = "rerank-1"
# Absolute, on raw logits: fused fp32 kernels differ from PyTorch by ~1e-6 here, while
# scores that change a ranking differ by far more.
MAX_LOGIT_DIFF = 1e-3
INSTALL_HINT = 'the ONNX reranker backend needs `pip install -e ".[onnx]"` (onnxruntime, onnx)'

PROBE_PAIRS: tuple[Pair, ...] = (
    ("hi", "hello"),
    ("how do wings generate lift", "Aircraft wings generate lift as air flows over the curved surface."),
    ("Café naïve coöperation", "日本語のテキスト, русский текст, Ελληνικά, emoji 🙂 and ∑ √"),
    ("what does the fox jump over", "The quick brown fox jumps over the lazy dog. " * 80),
    ("a query that is far too long " * 40, "a short passage"),
)


@dataclass(frozen=True, slots=True)
class RerankExport:
    """A verified cross-encoder export folder and what the run-time side needs from it."""

    path: Path
    max_length: int
    max_positions: int
    input_names: tuple[str, ...]
    max_abs_diff: float

    @property
    def model_file(self) -> Path:
        return self.path / MODEL_FILE


def rerank_onnx_dir(data_dir: Path, model_name: str) -> Path:
    """The export folder for a reranker: ``<data_dir>/models/<slug>-rerank-onnx``."""
    return onnx_cache_dir(data_dir, model_name, suffix="rerank-onnx")


def read_rerank_export(out_dir: Path, fingerprint: str) -> RerankExport | None:
    """The export in ``out_dir`` when it is complete and made from this source, else None."""
    meta = read_meta(out_dir, format_version=FORMAT, fingerprint=fingerprint)
    return None if meta is None else _export_from_meta(out_dir, meta)


def ensure_rerank_export(model_path: str, out_dir: Path) -> RerankExport:
    """Reuse the export in ``out_dir`` or make it (once) from the local model files."""
    fingerprint = source_fingerprint(model_path, format_version=FORMAT)
    found = read_rerank_export(out_dir, fingerprint)
    if found is not None:
        return found
    return export_cross_encoder(model_path, out_dir, fingerprint=fingerprint)


def export_cross_encoder(model_path: str, out_dir: Path, *, fingerprint: str) -> RerankExport:
    """Export, verify and atomically publish ``out_dir``; ConfigError when the scores differ."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    require_exporter(INSTALL_HINT)
    model: Any = load_cross_encoder(model_path, device="cpu")
    reference = CrossEncoderReranker(model)
    # Before the export switches the model to eager attention: the reference is the model as loaded.
    expected = np.array(reference.score_pairs(PROBE_PAIRS))
    hf_model = model[0].auto_model
    max_positions = int(getattr(hf_model.config, "max_position_embeddings", reference.max_length))

    def build(folder: Path) -> dict[str, Any]:
        tokenizer = model.tokenizer
        sample = tokenizer(
            ["a short query", "and a second one"],
            ["a passage", "and a somewhat longer second passage"],
            padding=True,
            return_tensors="pt",
        )
        input_names = export_transformer(
            hf_model, sample, folder, output="logits", output_name="logits", output_axes={0: "batch"}
        )
        tokenizer.save_pretrained(str(folder))
        meta: dict[str, Any] = {
            "format": FORMAT,
            "fingerprint": fingerprint,
            "source": model_path,
            "model_type": str(hf_model.config.model_type),
            "max_length": min(reference.max_length, max_positions),
            "max_positions": max_positions,
            "input_names": list(input_names),
            "max_abs_diff": 0.0,
        }
        onnx = OnnxCrossEncoderReranker(_export_from_meta(folder, meta), threads=1)
        diff = float(np.max(np.abs(np.array(onnx.score_pairs(PROBE_PAIRS)) - expected)))
        if not diff <= MAX_LOGIT_DIFF:  # also refuses NaN
            raise ConfigError(
                f"ONNX export of {model_path} differs from PyTorch (max |logit diff| {diff:.2e})"
            )
        meta["max_abs_diff"] = diff
        return meta

    meta = publish_export(out_dir, build)
    log.info(
        "exported reranker %s to ONNX in %s (max |logit diff| %.2e)",
        model_path,
        out_dir,
        meta["max_abs_diff"],
    )
    return _export_from_meta(out_dir, meta)


class OnnxCrossEncoderReranker(BatchedCrossEncoder):
    """A verified cross-encoder export run by onnxruntime on CPU.

    Same tokenizer, truncation (longest first, to ``max_length``) and token-capped batches
    as :class:`CrossEncoderReranker`; one forward pass at a time, each on ``threads``
    intra-op threads (default 1) with sequential execution.
    """

    def __init__(
        self,
        export: RerankExport,
        *,
        max_length: int | None = None,
        max_batch_tokens: int = 8192,
        max_batch_pairs: int = 128,
        threads: int | None = None,
    ) -> None:
        try:
            import onnxruntime  # noqa: F401  (imported here for a clear install hint)
            from transformers import AutoTokenizer
        except ImportError as exc:
            raise ConfigError(INSTALL_HINT) from exc
        limit = max_length or export.max_length
        if limit > export.max_positions:
            raise ConfigError(
                f"reranker max_length {limit} exceeds the model's {export.max_positions} positions"
            )
        tokenizer = AutoTokenizer.from_pretrained(str(export.path))
        super().__init__(tokenizer, max_batch_tokens=max_batch_tokens, max_batch_pairs=max_batch_pairs)
        self.export = export
        self._max_length = limit
        self._tokenizer = tokenizer
        self._session = cpu_session(export.model_file, threads=threads or 1)

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
    ) -> OnnxCrossEncoderReranker:
        """:func:`load_onnx_reranker`; ConfigError without ``data_dir`` (the export cache)."""
        if data_dir is None:
            raise ConfigError("the onnx reranker backend needs data_dir for its export cache")
        if resolve_device(device) != "cpu":
            log.warning("the onnx reranker backend runs on CPU; device %r ignored", device)
        return load_onnx_reranker(
            source,
            data_dir=data_dir,
            max_length=max_length,
            max_batch_tokens=max_batch_tokens,
            max_batch_pairs=max_batch_pairs,
            threads=threads,
        )

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def device(self) -> str:
        return "cpu"

    def _forward(self, pairs: list[Pair]) -> list[float]:
        encoded = self._tokenizer(
            [q for q, _ in pairs],
            [p for _, p in pairs],
            padding=True,
            truncation="longest_first",
            max_length=self.max_length,
            return_tensors="np",
        )
        feeds = {name: encoded[name].astype(np.int64) for name in self.export.input_names}
        logits = self._session.run(None, feeds)[0]
        return [float(v) for v in logits.reshape(len(pairs), -1)[:, 0]]


def load_onnx_reranker(
    model_path: str,
    *,
    data_dir: Path,
    max_length: int | None = None,
    max_batch_tokens: int = 8192,
    max_batch_pairs: int = 128,
    threads: int | None = None,
) -> OnnxCrossEncoderReranker:
    """The ONNX reranker for a local model folder, exported into ``data_dir`` on first use."""
    export = ensure_rerank_export(model_path, rerank_onnx_dir(data_dir, model_path))
    return OnnxCrossEncoderReranker(
        export,
        max_length=max_length,
        max_batch_tokens=max_batch_tokens,
        max_batch_pairs=max_batch_pairs,
        threads=threads,
    )


def _export_from_meta(out_dir: Path, meta: dict[str, Any]) -> RerankExport:
    return RerankExport(
        path=out_dir,
        max_length=int(meta["max_length"]),
        max_positions=int(meta["max_positions"]),
        input_names=tuple(meta["input_names"]),
        max_abs_diff=float(meta["max_abs_diff"]),
    )

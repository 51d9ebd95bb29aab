"""Export a sentence-transformers model to ONNX once, into a cache folder, and reuse it.

sentence-transformers' own ONNX backend needs ``optimum-onnx``, which pins
``transformers<4.58`` and so cannot live next to transformers 5. This module exports the
encoder with ``torch.onnx.export`` (the TorchScript exporter; it needs the ``onnx`` package)
and leaves pooling and normalisation to numpy, so the run-time side needs only
``onnxruntime`` and the model's own tokenizer. The encoder is traced with eager attention:
the SDPA graph traces into ops onnxruntime runs slowly on long batches (measured 16 vs 28
passages/s), while the eager one is recognised by onnxruntime's BERT fusions (fused
Attention, SkipLayerNormalization, BiasGelu), which are applied before publishing.

Layout of an export folder (``<data_dir>/models/<name>-onnx/``)::

    model.onnx        token embeddings for (input_ids, attention_mask[, token_type_ids])
    tokenizer files   saved from the source model, so loading needs no source folder
    meta.json         source fingerprint, dim, max_seq_length, pooling, verified cosines

Dynamic int8 quantisation (``onnxruntime.quantization.quantize_dynamic``) was tried and
dropped: the best variant (MatMul only, per channel, uint8 weights) reached a probe cosine of
0.985 to PyTorch, the default one 0.884, against the 0.999 this backend promises.

An export is verified against the PyTorch model before it is published: the folder appears
(atomically renamed from a temporary one) only when every probe text reaches ``MIN_COSINE``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import ConfigError

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
MIN_COSINE = 0.999
OPSET = 17
MODEL_FILE = "model.onnx"
META_FILE = "meta.json"
INSTALL_HINT = 'the ONNX embedding backend needs `pip install -e ".[onnx]"` (onnxruntime, onnx)'

# Varied probes: a one-word query, unicode, and a passage past max_seq_length (truncation).
PROBE_TEXTS = (
    "hi",
    "How do I rotate an API key without downtime?",
    "Café naïve coöperation — 日本語のテキスト, русский текст, emoji 🙂",
    "The quick brown fox jumps over the lazy dog. " * 80,
    "Permission-filtered hybrid search over sharded FAISS and BM25 indexes.",
)


@dataclass(frozen=True, slots=True)
class OnnxExport:
    """A verified export folder and what the run-time side needs to know about it."""

    path: Path
    dim: int
    max_seq_length: int
    pooling: str
    normalize: bool
    input_names: tuple[str, ...]
    min_cosine: float

    @property
    def model_file(self) -> Path:
        return self.path / MODEL_FILE


def onnx_cache_dir(data_dir: Path, model_name: str) -> Path:
    """The conventional export folder for a model: ``<data_dir>/models/<slug>-onnx``."""
    base = model_name.rstrip("/").split(":")[-1].split("/")[-1] or "model"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", base)
    return data_dir / "models" / f"{slug}-onnx"


def source_fingerprint(model_path: str) -> str:
    """Identity of the source model: names, sizes and mtimes of its files (or the hub name)."""
    root = Path(model_path)
    digest = hashlib.sha256(f"v{FORMAT_VERSION}".encode())
    if not root.is_dir():
        digest.update(model_path.encode())
        return digest.hexdigest()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        stat = file.stat()
        digest.update(f"{file.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def read_export(out_dir: Path, fingerprint: str) -> OnnxExport | None:
    """The export in ``out_dir`` when it is complete and made from this source, else None."""
    try:
        meta = json.loads((out_dir / META_FILE).read_text())
    except (OSError, ValueError):
        return None
    if meta.get("format") != FORMAT_VERSION or meta.get("fingerprint") != fingerprint:
        return None
    if not (out_dir / MODEL_FILE).is_file():
        return None
    return _export_from_meta(out_dir, meta)


def ensure_export(model_path: str, out_dir: Path) -> OnnxExport:
    """Reuse the export in ``out_dir`` or make it (once) from the local model files."""
    fingerprint = source_fingerprint(model_path)
    found = read_export(out_dir, fingerprint)
    if found is not None:
        return found
    return export_model(model_path, out_dir, fingerprint=fingerprint)


def export_model(model_path: str, out_dir: Path, *, fingerprint: str) -> OnnxExport:
    """Export, verify and atomically publish ``out_dir``; ConfigError when the output differs."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import onnx  # noqa: F401  (the TorchScript exporter imports it)
        import onnxruntime  # noqa: F401
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ConfigError(INSTALL_HINT) from exc
    try:
        model: Any = SentenceTransformer(model_path, device="cpu")
    except Exception as exc:  # OSError, ValueError, HF errors: all mean "cannot load"
        raise ConfigError(f"cannot load embedding model from {model_path}: {exc}") from exc
    pooling, normalize = _pipeline_shape(model)
    # Before the export switches the encoder to eager attention: the reference is the model as loaded.
    reference = model.encode(list(PROBE_TEXTS), normalize_embeddings=True, convert_to_numpy=True)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    tmp.chmod(0o755)
    try:
        input_names = _export_encoder(model, tmp / "traced.onnx")
        _fuse(tmp / "traced.onnx", tmp / MODEL_FILE, model[0].auto_model.config)
        (tmp / "traced.onnx").unlink()
        model.tokenizer.save_pretrained(str(tmp))
        meta: dict[str, Any] = {
            "format": FORMAT_VERSION,
            "fingerprint": fingerprint,
            "source": model_path,
            "dim": int(model[1].get_config_dict()["embedding_dimension"]),
            "max_seq_length": int(model.max_seq_length),
            "pooling": pooling,
            "normalize": normalize,
            "input_names": list(input_names),
        }
        meta["min_cosine"] = _verified_cosine(tmp, meta, reference)
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2))
        _publish(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("exported %s to ONNX in %s (min cosine %.6f)", model_path, out_dir, meta["min_cosine"])
    return _export_from_meta(out_dir, meta)


def pool(
    token_embeddings: np.ndarray, attention_mask: np.ndarray, *, pooling: str, normalize: bool
) -> np.ndarray:
    """Sentence vectors from token embeddings, as sentence-transformers' Pooling/Normalize do."""
    if pooling == "cls":
        vectors = token_embeddings[:, 0, :]
    else:
        mask = attention_mask[..., None].astype(np.float32)
        vectors = (token_embeddings * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
    if normalize:
        vectors = vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
    return np.ascontiguousarray(vectors, dtype=np.float32)


def _export_from_meta(out_dir: Path, meta: dict[str, Any]) -> OnnxExport:
    return OnnxExport(
        path=out_dir,
        dim=int(meta["dim"]),
        max_seq_length=int(meta["max_seq_length"]),
        pooling=str(meta["pooling"]),
        normalize=bool(meta["normalize"]),
        input_names=tuple(meta["input_names"]),
        min_cosine=float(meta["min_cosine"]),
    )


def _pipeline_shape(model: Any) -> tuple[str, bool]:
    """(pooling mode, normalised?) for a Transformer -> Pooling [-> Normalize] model."""
    names = [type(module).__name__ for module in model]
    if names[:2] != ["Transformer", "Pooling"] or names[2:] not in ([], ["Normalize"]):
        raise ConfigError(f"the ONNX backend supports Transformer -> Pooling [-> Normalize], not {names}")
    mode = str(model[1].get_config_dict().get("pooling_mode", ""))
    if mode not in ("mean", "cls"):
        raise ConfigError(f"the ONNX backend supports mean or cls pooling, not {mode!r}")
    return mode, names[2:] == ["Normalize"]


def _export_encoder(model: Any, target: Path) -> tuple[str, ...]:
    import torch

    encoder = model[0].auto_model.eval()
    if hasattr(encoder, "set_attn_implementation"):
        encoder.set_attn_implementation("eager")
    tokenizer = model.tokenizer
    names = tuple(
        n for n in ("input_ids", "attention_mask", "token_type_ids") if n in tokenizer.model_input_names
    )

    class TokenEmbeddings(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return self.encoder(**dict(zip(names, inputs, strict=True))).last_hidden_state

    sample = tokenizer(
        ["a short one", "and a somewhat longer second sample"], padding=True, return_tensors="pt"
    )
    axes = {name: {0: "batch", 1: "sequence"} for name in (*names, "token_embeddings")}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about shape-dependent Python branches
        torch.onnx.export(
            TokenEmbeddings(),
            tuple(sample[name] for name in names),
            str(target),
            dynamo=False,
            input_names=list(names),
            output_names=["token_embeddings"],
            dynamic_axes=axes,
            opset_version=OPSET,
        )
    return names


def _verified_cosine(folder: Path, meta: dict[str, Any], reference: np.ndarray) -> float:
    import onnxruntime as ort
    from transformers import AutoTokenizer

    session = ort.InferenceSession(str(folder / MODEL_FILE), providers=["CPUExecutionProvider"])
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    encoded = tokenizer(
        list(PROBE_TEXTS),
        padding=True,
        truncation="longest_first",
        max_length=meta["max_seq_length"],
        return_tensors="np",
    )
    feeds = {name: encoded[name].astype(np.int64) for name in meta["input_names"]}
    tokens = session.run(None, feeds)[0]
    vectors = pool(tokens, encoded["attention_mask"], pooling=meta["pooling"], normalize=True)
    cosine = float(np.min(np.sum(vectors * reference, axis=1)))
    if cosine < MIN_COSINE:
        raise ConfigError(f"ONNX export of {meta['source']} differs from PyTorch (min cosine {cosine:.5f})")
    return cosine


def _fuse(source: Path, target: Path, config: Any) -> None:
    """onnxruntime's transformer fusions for BERT encoders; the plain graph otherwise."""
    if config.model_type != "bert":  # the only family measured here; others run unfused
        shutil.copyfile(source, target)
        return
    from onnxruntime.transformers.optimizer import optimize_model

    optimized = optimize_model(
        str(source),
        model_type="bert",
        num_heads=int(config.num_attention_heads),
        hidden_size=int(config.hidden_size),
    )
    log.info("onnxruntime fusions: %s", optimized.get_fused_operator_statistics())
    optimized.save_model_to_file(str(target))


def _publish(tmp: Path, out_dir: Path) -> None:
    """Move ``tmp`` into place; a stale export is replaced, a concurrent twin is kept."""
    if out_dir.exists():
        stale = out_dir.with_name(f".{out_dir.name}-stale-{os.getpid()}")
        try:
            out_dir.rename(stale)
        except OSError:
            pass  # another process just replaced it
        else:
            shutil.rmtree(stale, ignore_errors=True)
    try:
        tmp.rename(out_dir)
    except OSError:
        log.info("%s was published concurrently; keeping that copy", out_dir)

"""Export transformer models to ONNX once, into a cache folder, and reuse them.

sentence-transformers' own ONNX backend needs ``optimum-onnx``, which pins
``transformers<4.58`` and so cannot live next to transformers 5. This module exports the
encoder with ``torch.onnx.export`` (the TorchScript exporter; it needs the ``onnx`` package)
and leaves pooling and normalisation to numpy, so the run-time side needs only
``onnxruntime`` and the model's own tokenizer. The encoder is traced with eager attention:
the SDPA graph traces into ops onnxruntime runs slowly on long batches (measured 16 vs 28
passages/s), while the eager one is recognised by onnxruntime's BERT fusions (fused
Attention, SkipLayerNormalization, BiasGelu), which are applied before publishing.

The building blocks (:func:`source_fingerprint`, :func:`read_meta`,
:func:`export_transformer`, :func:`publish_export`) are shared with the cross-encoder
export in ``rerank.onnx_backend``; the rest of this module is the embedding model's export.

Layout of an export folder (``<data_dir>/models/<name>-onnx/``)::

    model.onnx        token embeddings for (input_ids, attention_mask[, token_type_ids])
    tokenizer files   saved from the source model, so loading needs no source folder
    meta.json         source fingerprint, dim, max_seq_length, pooling, verified cosines

A query encoder may run an int8 copy (:func:`ensure_int8_export`, ``<export>-int8/``):
``onnxruntime.quantization.quantize_dynamic`` with per-channel int8 weights on the fused
attention blocks and the MatMuls, except each feed-forward block's down-projection (the
quantised activations after GELU are where most error came from: measured over 100 CISI
queries, 100 titles and the probes, min cosine to fp32 0.987 with every MatMul quantised,
0.993 without the down-projections, 0.990 with attention quantised too, which is kept as the
cheapest: 0.63x fp32's CPU per query). It cannot promise the fp32
export's 0.999; it is verified against the fp32 export at ``INT8_MIN_COSINE`` on the probes,
and admitted for serving by retrieval quality (``bench.query_precision``: nDCG@10 within
0.005 of fp32 queries on every shared collection), not by cosine.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.backends import require_exporter
from core.errors import ConfigError

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
MIN_COSINE = 0.999
INT8_FORMAT = "int8-1"
INT8_MIN_COSINE = 0.98
# Quantised in an int8 copy: the fused attention blocks and the MatMuls but down-projections.
INT8_OPS = ("MatMul", "Attention")
OPSET = 17
MODEL_FILE = "model.onnx"
META_FILE = "meta.json"
INSTALL_HINT = 'the ONNX embedding backend needs `pip install -e ".[onnx]"` (onnxruntime, onnx)'
# The order the exported graphs take their inputs in (a subset, per tokenizer).
INPUT_ORDER = ("input_ids", "attention_mask", "token_type_ids")

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


def onnx_cache_dir(data_dir: Path, model_name: str, *, suffix: str = "onnx") -> Path:
    """The conventional export folder for a model: ``<data_dir>/models/<slug>-<suffix>``."""
    base = model_name.rstrip("/").split(":")[-1].split("/")[-1] or "model"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", base)
    return data_dir / "models" / f"{slug}-{suffix}"


def source_fingerprint(model_path: str, *, format_version: int | str = FORMAT_VERSION) -> str:
    """Identity of the source model: names, sizes and mtimes of its files (or the hub name).

    ``format_version`` is mixed in, so a change to an export's layout invalidates old copies
    and two kinds of export made from one folder never match each other.
    """
    root = Path(model_path)
    digest = hashlib.sha256(f"v{format_version}".encode())
    if not root.is_dir():
        digest.update(model_path.encode())
        return digest.hexdigest()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        stat = file.stat()
        digest.update(f"{file.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def read_meta(out_dir: Path, *, format_version: int | str, fingerprint: str) -> dict[str, Any] | None:
    """The meta of the export in ``out_dir`` when it is complete and made from this source."""
    try:
        meta = json.loads((out_dir / META_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    if meta.get("format") != format_version or meta.get("fingerprint") != fingerprint:
        return None
    if not (out_dir / MODEL_FILE).is_file():
        return None
    return meta


def read_export(out_dir: Path, fingerprint: str) -> OnnxExport | None:
    """The export in ``out_dir`` when it is complete and made from this source, else None."""
    meta = read_meta(out_dir, format_version=FORMAT_VERSION, fingerprint=fingerprint)
    return None if meta is None else _export_from_meta(out_dir, meta)


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
    require_exporter(INSTALL_HINT)
    try:
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

    def build(folder: Path) -> dict[str, Any]:
        tokenizer = model.tokenizer
        sample = tokenizer(
            ["a short one", "and a somewhat longer second sample"], padding=True, return_tensors="pt"
        )
        input_names = export_transformer(
            model[0].auto_model,
            sample,
            folder,
            output="last_hidden_state",
            output_name="token_embeddings",
            output_axes={0: "batch", 1: "sequence"},
        )
        tokenizer.save_pretrained(str(folder))
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
        meta["min_cosine"] = _verified_cosine(folder, meta, reference)
        return meta

    meta = publish_export(out_dir, build)
    log.info("exported %s to ONNX in %s (min cosine %.6f)", model_path, out_dir, meta["min_cosine"])
    return _export_from_meta(out_dir, meta)


def int8_cache_dir(export_dir: Path) -> Path:
    """Where the int8 copy of the export in ``export_dir`` lives: ``<export_dir>-int8``."""
    return export_dir.with_name(f"{export_dir.name}-int8")


def ensure_int8_export(export: OnnxExport, out_dir: Path) -> OnnxExport:
    """Reuse or make (once) the dynamically quantised copy of a verified fp32 export.

    The copy's identity is the fp32 folder's (its files' names, sizes and mtimes), so a
    re-export of the source invalidates it. ConfigError when the onnxruntime quantiser is
    missing or the copy's probe vectors leave ``INT8_MIN_COSINE`` of the fp32 ones.
    """
    fingerprint = source_fingerprint(str(export.path), format_version=INT8_FORMAT)
    meta = read_meta(out_dir, format_version=INT8_FORMAT, fingerprint=fingerprint)
    if meta is not None:
        return _export_from_meta(out_dir, meta)
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise ConfigError(INSTALL_HINT) from exc

    def build(folder: Path) -> dict[str, Any]:
        import onnx

        graph = onnx.load(str(export.model_file))
        kept = down_projections(graph)
        quantize_dynamic(
            export.model_file,
            folder / MODEL_FILE,
            op_types_to_quantize=list(INT8_OPS),
            per_channel=True,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=kept,
            # The fused graph's contrib ops (SkipLayerNormalization...) defeat shape inference.
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
        for file in export.path.iterdir():
            if file.is_file() and file.name not in (MODEL_FILE, META_FILE):
                shutil.copy2(file, folder / file.name)
        meta: dict[str, Any] = {
            "format": INT8_FORMAT,
            "fingerprint": fingerprint,
            "source": str(export.path),
            "dim": export.dim,
            "max_seq_length": export.max_seq_length,
            "pooling": export.pooling,
            "normalize": export.normalize,
            "input_names": list(export.input_names),
            "fp32_matmuls": kept,
        }
        reference = _probe_vectors(export.path, meta)
        cosine = float(np.min(np.sum(_probe_vectors(folder, meta) * reference, axis=1)))
        if cosine < INT8_MIN_COSINE:
            raise ConfigError(f"int8 copy of {export.path} differs from fp32 (min cosine {cosine:.5f})")
        meta["min_cosine"] = cosine
        return meta

    meta = publish_export(out_dir, build)
    log.info("quantised %s to int8 in %s (min cosine %.6f)", export.path, out_dir, meta["min_cosine"])
    return _export_from_meta(out_dir, meta)


def down_projections(graph: Any) -> list[str]:
    """Names of the MatMuls whose constant weight narrows its input (a feed-forward block's
    output projection, ``[intermediate, hidden]``): the ones kept fp32 in an int8 copy."""
    shapes = {init.name: tuple(init.dims) for init in graph.graph.initializer}
    names = []
    for node in graph.graph.node:
        if node.op_type != "MatMul":
            continue
        weight = next((shapes[name] for name in node.input if name in shapes), None)
        if weight is not None and len(weight) == 2 and weight[0] > weight[1]:
            names.append(node.name)
    return names


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


def export_transformer(
    module: Any,
    sample: Mapping[str, Any],
    folder: Path,
    *,
    output: str,
    output_name: str,
    output_axes: dict[int, str],
) -> tuple[str, ...]:
    """Trace a Hugging Face model into ``folder/model.onnx`` with eager attention, then fuse it.

    Args:
        module: a ``transformers`` model (``BertModel``, ``BertForSequenceClassification``...);
            switched to eager attention and eval mode in place.
        sample: tokenizer output (``return_tensors="pt"``) to trace with; its keys, in
            ``INPUT_ORDER``, become the graph's inputs, batch and sequence axes dynamic.
        folder: where ``model.onnx`` is written (an intermediate file is removed).
        output: attribute of the model's output to export (``last_hidden_state``, ``logits``).
        output_name: the graph output's name.
        output_axes: dynamic axes of that output, e.g. ``{0: "batch"}``.

    Returns:
        The graph's input names, in order.
    """
    import torch

    module = module.eval()
    if hasattr(module, "set_attn_implementation"):
        module.set_attn_implementation("eager")
    names = tuple(name for name in INPUT_ORDER if name in sample)

    class Traced(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return getattr(self.inner(**dict(zip(names, inputs, strict=True))), output)

    traced = folder / "traced.onnx"
    axes: dict[str, dict[int, str]] = {name: {0: "batch", 1: "sequence"} for name in names}
    axes[output_name] = output_axes
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about shape-dependent Python branches
        torch.onnx.export(
            Traced(),
            tuple(sample[name] for name in names),
            str(traced),
            dynamo=False,
            input_names=list(names),
            output_names=[output_name],
            dynamic_axes=axes,
            opset_version=OPSET,
        )
    _fuse(traced, folder / MODEL_FILE, module.config)
    traced.unlink()
    return names


def publish_export(out_dir: Path, build: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """Build an export in a temporary sibling of ``out_dir`` and publish it atomically.

    Args:
        out_dir: the export folder; an existing one is replaced.
        build: writes ``model.onnx`` and whatever else into the folder it is given, verifies
            it (raising to abandon the export) and returns the meta to write as ``meta.json``.

    Returns:
        The meta written.
    """
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    tmp.chmod(0o755)
    try:
        meta = build(tmp)
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2))
        _publish(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return meta


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


def _probe_vectors(folder: Path, meta: dict[str, Any]) -> np.ndarray:
    """The export in ``folder`` run on ``PROBE_TEXTS``: unit-norm sentence vectors."""
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
    return pool(tokens, encoded["attention_mask"], pooling=meta["pooling"], normalize=True)


def _verified_cosine(folder: Path, meta: dict[str, Any], reference: np.ndarray) -> float:
    vectors = _probe_vectors(folder, meta)
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

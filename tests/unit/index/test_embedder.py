"""Embedder contract on both backends, and the ONNX backend's agreement with PyTorch.

These load the real bundled model (the ONNX export takes ~30 s on 2 cores, once per session).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from core.errors import ConfigError
from index.embedder import Embedder, OnnxEmbedder, load_embedder, resolve_model_path
from index.onnx_export import (
    INT8_FORMAT,
    INT8_MIN_COSINE,
    META_FILE,
    MIN_COSINE,
    MODEL_FILE,
    ensure_int8_export,
    int8_cache_dir,
    onnx_cache_dir,
    read_export,
    read_meta,
    source_fingerprint,
)

pytestmark = pytest.mark.integration

MODEL = "bundled:all-MiniLM-L6-v2"
HAS_ONNX = all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx"))
needs_onnx = pytest.mark.skipif(
    not HAS_ONNX, reason='the onnx extra is not installed: pip install -e ".[onnx]"'
)

LONG = " ".join(f"token{i} and some filler words about retrieval systems" for i in range(120))
TEXTS = [
    "hi",
    "a",
    "?",
    "   leading and trailing spaces   ",
    "How do I rotate an API key without downtime?",
    "permission filtered hybrid search",
    "What is reciprocal rank fusion?",
    "BM25 vs dense retrieval on short queries",
    "Café naïve coöperation résumé",
    "日本語のテキストを埋め込む",
    "русский текст для проверки",
    "emoji 🙂🚀 and symbols ∑ ∫ √",
    "Ελληνικά και عربى and हिन्दी",
    "UPPER CASE SHOUTING TEXT",
    "numbers 3.14159 2026-01-01 0xDEADBEEF",
    "code: def f(x): return x ** 2",
    "https://example.com/path?query=1&b=2",
    "tab\tseparated\tvalues\nand new lines",
    LONG,
    "The quick brown fox jumps over the lazy dog. " * 60,
    "word " * 600,
    "Übergrößenträger " * 100,
]
TEXTS += [
    f"Passage {i}: the {topic} subsystem stores {i * 7} records and answers queries in {i % 9 + 1} ms."
    for i, topic in enumerate(["catalog", "index", "ingest", "rerank", "authz", "api", "jobs"] * 4)
]


def unit_norm_contract(embedder: Embedder) -> None:
    vectors = embedder.embed(TEXTS[:7])
    assert vectors.shape == (7, 384)
    assert vectors.dtype == np.float32
    assert vectors.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    empty = embedder.embed([])
    assert empty.shape == (0, 384)
    assert empty.dtype == np.float32
    assert embedder.dim == 384
    assert embedder.max_tokens == 256


@pytest.fixture(scope="module")
def onnx_dir(onnx_models: Path) -> Path:
    return onnx_cache_dir(onnx_models.parent, MODEL)


@pytest.fixture(scope="module")
def onnx_embedder(onnx_dir: Path) -> OnnxEmbedder:
    if not HAS_ONNX:
        pytest.skip('the onnx extra is not installed: pip install -e ".[onnx]"')
    return OnnxEmbedder(MODEL, onnx_dir=onnx_dir, threads=1)


@pytest.fixture(params=["torch", pytest.param("onnx", marks=needs_onnx)])
def any_embedder(request: pytest.FixtureRequest) -> Embedder:
    name = "embedder" if request.param == "torch" else "onnx_embedder"
    embedder: Embedder = request.getfixturevalue(name)
    return embedder


def test_embed_contract(any_embedder: Embedder) -> None:
    unit_norm_contract(any_embedder)


def test_rows_follow_input_order(any_embedder: Embedder) -> None:
    # The ONNX backend sorts by length internally; each row must still match its own text.
    batch = any_embedder.embed(TEXTS)
    single = np.vstack([any_embedder.embed([text]) for text in TEXTS])
    assert np.min(np.sum(batch * single, axis=1)) >= 0.9999


def test_count_tokens_matches_tokenizer(any_embedder: Embedder) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(MODEL))
    for text in ("hi", "Café naïve 日本語 🙂", LONG):
        expected = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        assert any_embedder.count_tokens(text) == expected
    assert any_embedder.count_tokens(LONG) > 256  # counting does not truncate


@needs_onnx
def test_onnx_vectors_match_torch(embedder: Embedder, onnx_embedder: OnnxEmbedder) -> None:
    cosines = np.sum(embedder.embed(TEXTS) * onnx_embedder.embed(TEXTS), axis=1)
    assert len(TEXTS) >= 50
    assert float(cosines.min()) >= MIN_COSINE, [TEXTS[i][:40] for i in np.where(cosines < MIN_COSINE)[0]]


@needs_onnx
def test_onnx_export_is_reused(
    onnx_embedder: OnnxEmbedder, onnx_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = (onnx_dir / MODEL_FILE).stat().st_mtime_ns

    def no_export(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cached export should have been reused")

    monkeypatch.setattr("index.onnx_export.export_model", no_export)
    again = load_embedder(MODEL, device="cpu", backend="onnx", onnx_dir=onnx_dir)
    assert (onnx_dir / MODEL_FILE).stat().st_mtime_ns == before
    np.testing.assert_allclose(again.embed(["hi"]), onnx_embedder.embed(["hi"]), atol=1e-6)
    meta = json.loads((onnx_dir / "meta.json").read_text())
    assert meta["min_cosine"] >= MIN_COSINE


@needs_onnx
def test_export_from_another_source_is_not_reused(onnx_embedder: OnnxEmbedder, onnx_dir: Path) -> None:
    assert read_export(onnx_dir, source_fingerprint(resolve_model_path(MODEL))) is not None
    assert read_export(onnx_dir, "another model") is None
    assert read_export(onnx_dir.parent / "absent", "any") is None


@needs_onnx
def test_onnx_embed_is_thread_safe(onnx_embedder: OnnxEmbedder) -> None:
    expected = onnx_embedder.embed(TEXTS[:10])
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: onnx_embedder.embed(TEXTS[:10]), range(8)))
    for got in results:
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_onnx_without_runtime_gives_install_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes `import onnxruntime` fail
    with pytest.raises(ConfigError, match=r"pip install -e \"\.\[onnx\]\""):
        OnnxEmbedder(MODEL, onnx_dir=tmp_path / "m-onnx")


def test_onnx_backend_needs_a_folder() -> None:
    with pytest.raises(ConfigError, match="onnx_dir"):
        load_embedder(MODEL, backend="onnx")


def test_unknown_backend_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown embedding backend"):
        load_embedder(MODEL, backend="tensorflow")  # type: ignore[arg-type]


def test_cache_dir_is_named_after_the_model(tmp_path: Path) -> None:
    assert onnx_cache_dir(tmp_path, MODEL) == tmp_path / "models" / "all-MiniLM-L6-v2-onnx"
    assert onnx_cache_dir(tmp_path, "/opt/models/my model/") == tmp_path / "models" / "my_model-onnx"


@pytest.fixture(scope="module")
def int8_embedder(onnx_embedder: OnnxEmbedder, onnx_dir: Path) -> OnnxEmbedder:
    return OnnxEmbedder(MODEL, onnx_dir=onnx_dir, threads=1, precision="int8")


@needs_onnx
def test_int8_query_encoder_keeps_the_contract_close_to_fp32(
    int8_embedder: OnnxEmbedder, onnx_embedder: OnnxEmbedder, onnx_dir: Path
) -> None:
    import onnx

    unit_norm_contract(int8_embedder)
    assert int8_embedder.precision == "int8" and int8_embedder.export.path == int8_cache_dir(onnx_dir)
    cosines = np.sum(int8_embedder.embed(TEXTS) * onnx_embedder.embed(TEXTS), axis=1)
    # Measured: mean 0.995, the worst a lone "?" at 0.972 (a text with no content to keep);
    # retrieval quality, not cosine, is what admits int8 (bench.query_precision).
    assert float(cosines.mean()) >= 0.99 and float(cosines.min()) >= 0.95
    assert float(cosines.min()) < MIN_COSINE  # really another model, not the fp32 file again
    meta = json.loads((int8_cache_dir(onnx_dir) / META_FILE).read_text())
    assert meta["format"] == INT8_FORMAT and meta["min_cosine"] >= INT8_MIN_COSINE
    # The six feed-forward down-projections stay fp32; the rest is integer arithmetic.
    assert len(meta["fp32_matmuls"]) == 6 and all("output/dense" in n for n in meta["fp32_matmuls"])
    ops = Counter(node.op_type for node in onnx.load(str(int8_embedder.export.model_file)).graph.node)
    # 6 layers: every attention block and 12 of 18 MatMuls integer, the 6 down-projections fp32.
    assert (ops["QAttention"], ops["MatMulInteger"], ops["MatMul"], ops["Attention"]) == (6, 12, 6, 0)


@needs_onnx
def test_int8_copy_is_reused_and_follows_its_fp32_export(
    int8_embedder: OnnxEmbedder, onnx_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_quantize(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cached int8 copy should have been reused")

    monkeypatch.setattr("onnxruntime.quantization.quantize_dynamic", no_quantize)
    again = load_embedder(MODEL, device="cpu", backend="onnx", onnx_dir=onnx_dir, precision="int8")
    np.testing.assert_allclose(again.embed(["hi"]), int8_embedder.embed(["hi"]), atol=1e-6)
    fingerprint = source_fingerprint(str(onnx_dir), format_version=INT8_FORMAT)
    assert read_meta(int8_cache_dir(onnx_dir), format_version=INT8_FORMAT, fingerprint=fingerprint)
    # Another fp32 export (here: its files' identity) is another source: no reuse.
    assert read_meta(int8_cache_dir(onnx_dir), format_version=INT8_FORMAT, fingerprint="other") is None


@needs_onnx
def test_an_int8_copy_below_its_cosine_is_refused_and_not_published(
    onnx_embedder: OnnxEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("index.onnx_export.INT8_MIN_COSINE", 1.01)
    out = tmp_path / "refused-int8"
    with pytest.raises(ConfigError, match="int8 copy .* differs from fp32"):
        ensure_int8_export(onnx_embedder.export, out)
    assert not out.exists() and not list(tmp_path.iterdir())


def test_int8_needs_the_onnx_backend() -> None:
    with pytest.raises(ConfigError, match="int8 weights need the onnx embedding backend"):
        load_embedder(MODEL, backend="torch", precision="int8")
    with pytest.raises(ConfigError, match="unknown precision"):
        OnnxEmbedder(MODEL, onnx_dir=Path("/nonexistent"), precision="fp16")  # type: ignore[arg-type]

"""The ONNX Runtime reranker against PyTorch on the trained fixture model (real models, no mocks).

The export of the fixture takes ~10 s on 2 cores, once per session; tests that need it are
marked ``slow``. Backend selection and its errors are checked without exporting.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from core.errors import ConfigError
from core.settings import RerankSettings, Settings
from index.onnx_export import MODEL_FILE, source_fingerprint
from rerank import BatchingReranker, CrossEncoderReranker, load_reranker
from rerank.cross_encoder import resolve_backend
from rerank.onnx_backend import (
    FORMAT,
    MAX_LOGIT_DIFF,
    OnnxCrossEncoderReranker,
    read_rerank_export,
    rerank_onnx_dir,
)
from tests.unit.rerank.conftest import HAS_ONNX, TOPICS, needs_onnx
from wiring import build_reranker

# The briefly trained cross-encoder (tests/unit/rerank/conftest.py): not in ``make unit``.
pytestmark = pytest.mark.integration

PASSAGES = [passage for _, passage in TOPICS]
LONG = "the lift of a wing in a slipstream depends on the angle of attack " * 40
# Short, unicode, empty-ish, and past max_length (64) on the passage side, the query side and both.
PAIRS = [
    ("hi", "hello"),
    ("?", "a"),
    ("capital of france", PASSAGES[2]),
    ("how do cats purr", PASSAGES[5]),
    ("Café naïve coöperation", "日本語のテキスト, русский текст, Ελληνικά, emoji 🙂 ∑ √"),
    ("wing lift", LONG),
    (LONG, "wings generate lift"),
    (LONG, LONG),
    *((query, passage) for query, _ in TOPICS[:3] for passage in PASSAGES),
]


@pytest.mark.parametrize("pair", PAIRS[:8], ids=range(8))
@pytest.mark.slow
@needs_onnx
def test_each_pair_scores_like_torch(
    pair: tuple[str, str], reranker: CrossEncoderReranker, onnx_reranker: OnnxCrossEncoderReranker
) -> None:
    (expected,) = reranker.score_pairs([pair])
    (got,) = onnx_reranker.score_pairs([pair])
    assert abs(got - expected) <= MAX_LOGIT_DIFF


@pytest.mark.slow
@needs_onnx
def test_mixed_batch_scores_like_torch(
    reranker: CrossEncoderReranker, onnx_reranker: OnnxCrossEncoderReranker
) -> None:
    diff = np.abs(np.array(onnx_reranker.score_pairs(PAIRS)) - np.array(reranker.score_pairs(PAIRS)))
    assert float(diff.max()) <= MAX_LOGIT_DIFF
    assert 0.0 <= onnx_reranker.export.max_abs_diff <= MAX_LOGIT_DIFF  # what the export verified


@pytest.mark.slow
@needs_onnx
def test_ranks_positives_first_like_torch(
    reranker: CrossEncoderReranker, onnx_reranker: OnnxCrossEncoderReranker
) -> None:
    for i, (query, _) in enumerate(TOPICS):
        torch_scores = reranker.score(query, PASSAGES)
        onnx_scores = onnx_reranker.score(query, PASSAGES)
        assert int(np.argmax(onnx_scores)) == i, query
        assert list(np.argsort(onnx_scores)) == list(np.argsort(torch_scores)), query


@pytest.mark.slow
@needs_onnx
def test_pair_tokens_match_torch(
    reranker: CrossEncoderReranker, onnx_reranker: OnnxCrossEncoderReranker
) -> None:
    assert onnx_reranker.pair_tokens(PAIRS) == reranker.pair_tokens(PAIRS)
    assert max(onnx_reranker.pair_tokens(PAIRS)) == onnx_reranker.max_length == 64


@pytest.mark.slow
@needs_onnx
def test_token_capped_batches_score_the_same(
    model_dir: Path, onnx_data_dir: Path, onnx_reranker: OnnxCrossEncoderReranker
) -> None:
    small = load_reranker(
        str(model_dir), device="cpu", backend="onnx", data_dir=onnx_data_dir, max_batch_tokens=64
    )
    assert np.allclose(small.score_pairs(PAIRS), onnx_reranker.score_pairs(PAIRS), atol=1e-5)


@pytest.mark.slow
@needs_onnx
def test_batching_reranker_over_onnx_matches_torch(
    reranker: CrossEncoderReranker, onnx_reranker: OnnxCrossEncoderReranker
) -> None:
    requests = [(query, PASSAGES[i:] + PASSAGES[:i]) for i, (query, _) in enumerate(TOPICS)]
    with BatchingReranker(onnx_reranker, max_batch_tokens=512, max_wait_ms=30) as batcher:
        with ThreadPoolExecutor(len(requests)) as pool:
            results = list(pool.map(lambda r: batcher.score(r[0], r[1], timeout_s=60), requests))
    for (query, passages), got in zip(requests, results, strict=True):
        assert np.allclose(got, reranker.score(query, passages), atol=MAX_LOGIT_DIFF)


@pytest.mark.slow
@needs_onnx
def test_concurrent_scoring_is_safe(onnx_reranker: OnnxCrossEncoderReranker) -> None:
    expected = onnx_reranker.score_pairs(PAIRS)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: onnx_reranker.score_pairs(PAIRS), range(8)))
    for got in results:
        assert np.allclose(got, expected, atol=1e-5)


@pytest.mark.slow
@needs_onnx
def test_export_is_reused(
    model_dir: Path,
    onnx_data_dir: Path,
    onnx_reranker: OnnxCrossEncoderReranker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = rerank_onnx_dir(onnx_data_dir, str(model_dir))
    assert onnx_reranker.export.path == folder
    before = (folder / MODEL_FILE).stat().st_mtime_ns
    exports = []
    monkeypatch.setattr("rerank.onnx_backend.export_cross_encoder", lambda *a, **k: exports.append(a))
    again = load_reranker(str(model_dir), device="cpu", backend="onnx", data_dir=onnx_data_dir, threads=2)
    assert exports == []
    assert (folder / MODEL_FILE).stat().st_mtime_ns == before
    assert again.score_pairs(PAIRS[:4]) == pytest.approx(onnx_reranker.score_pairs(PAIRS[:4]), abs=1e-5)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["format"] == FORMAT and meta["max_length"] == 64
    assert meta["fingerprint"] == source_fingerprint(str(model_dir), format_version=FORMAT)


@pytest.mark.slow
@needs_onnx
def test_export_from_another_source_is_not_reused(
    model_dir: Path, onnx_data_dir: Path, onnx_reranker: OnnxCrossEncoderReranker
) -> None:
    folder = rerank_onnx_dir(onnx_data_dir, str(model_dir))
    assert read_rerank_export(folder, source_fingerprint(str(model_dir), format_version=FORMAT)) is not None
    # The embedder's fingerprint of the same folder, or another model, never matches.
    assert read_rerank_export(folder, source_fingerprint(str(model_dir))) is None
    assert read_rerank_export(folder, "another model") is None
    assert read_rerank_export(onnx_data_dir / "absent", "any") is None


def test_fingerprint_follows_the_model_files(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    first = source_fingerprint(str(tmp_path), format_version=FORMAT)
    assert source_fingerprint(str(tmp_path), format_version=FORMAT) == first
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    assert source_fingerprint(str(tmp_path), format_version=FORMAT) != first


@pytest.mark.slow
@needs_onnx
def test_max_length_override_and_its_limit(
    model_dir: Path, onnx_data_dir: Path, onnx_reranker: OnnxCrossEncoderReranker
) -> None:
    short = load_reranker(str(model_dir), device="cpu", backend="onnx", data_dir=onnx_data_dir, max_length=32)
    assert short.max_length == 32
    assert short.pair_tokens([("wing lift", LONG)]) == [32]
    with pytest.raises(ConfigError, match="positions"):
        OnnxCrossEncoderReranker(onnx_reranker.export, max_length=4096)


@pytest.mark.slow
@needs_onnx
def test_settings_wire_the_onnx_backend(
    model_dir: Path, onnx_data_dir: Path, onnx_reranker: OnnxCrossEncoderReranker
) -> None:
    settings = Settings(
        data_dir=onnx_data_dir, rerank={"model": str(model_dir), "backend": "onnx", "threads": 1}
    )
    scorer = build_reranker(settings)
    assert scorer is not None
    try:
        got = scorer.score("capital of france", PASSAGES)
        assert got == pytest.approx(onnx_reranker.score("capital of france", PASSAGES), abs=1e-5)
    finally:
        scorer.close()


def test_settings_default_to_torch_with_one_thread() -> None:
    assert RerankSettings().backend == "torch"
    assert RerankSettings().threads == 1
    with pytest.raises(ValueError):
        Settings(rerank={"backend": "tensorflow"})


def test_auto_picks_onnx_only_on_cpu_with_a_cache(tmp_path: Path) -> None:
    assert resolve_backend("auto", device="cpu", data_dir=tmp_path) == ("onnx" if HAS_ONNX else "torch")
    assert resolve_backend("auto", device="cpu", data_dir=None) == "torch"
    assert resolve_backend("auto", device="cuda", data_dir=tmp_path) == "torch"
    assert resolve_backend("torch", device="cpu", data_dir=tmp_path) == "torch"
    assert resolve_backend("onnx", device="cpu", data_dir=None) == "onnx"


def test_auto_without_onnxruntime_is_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes `import onnxruntime` fail
    assert resolve_backend("auto", device="cpu", data_dir=tmp_path) == "torch"


def test_unknown_backend_is_a_config_error(model_dir: Path) -> None:
    with pytest.raises(ConfigError, match="unknown reranker backend"):
        load_reranker(str(model_dir), backend="tensorflow")  # type: ignore[arg-type]


def test_onnx_without_runtime_gives_install_hint(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ConfigError, match=r"pip install -e \"\.\[onnx\]\""):
        load_reranker(str(model_dir), device="cpu", backend="onnx", data_dir=tmp_path)
    assert not (tmp_path / "models").exists()


def test_onnx_needs_a_data_dir(model_dir: Path) -> None:
    with pytest.raises(ConfigError, match="data_dir"):
        load_reranker(str(model_dir), device="cpu", backend="onnx")


def test_missing_folder_is_a_config_error_on_every_backend(tmp_path: Path) -> None:
    for backend in ("torch", "onnx", "auto"):
        with pytest.raises(ConfigError, match="not found"):
            load_reranker("/nonexistent/reranker", backend=backend, data_dir=tmp_path)


def test_failed_auto_export_falls_back_to_torch(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ConfigError("export failed")

    monkeypatch.setattr("rerank.onnx_backend.export_cross_encoder", broken)
    if HAS_ONNX:
        with pytest.raises(ConfigError, match="export failed"):
            load_reranker(str(model_dir), device="cpu", backend="onnx", data_dir=tmp_path)
    fallback = load_reranker(str(model_dir), device="cpu", backend="auto", data_dir=tmp_path)
    assert isinstance(fallback, CrossEncoderReranker)

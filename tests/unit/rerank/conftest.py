"""Fixtures for the rerank tests: one briefly trained cross-encoder per session, on both backends."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rerank import CrossEncoderReranker, TrainingPair, TrainReport, load_reranker, train_reranker
from rerank.onnx_backend import OnnxCrossEncoderReranker
from rerank.scoring import BatchedCrossEncoder

HAS_ONNX = all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx"))
NO_ONNX = 'the onnx extra is not installed: pip install -e ".[onnx]"'
needs_onnx = pytest.mark.skipif(not HAS_ONNX, reason=NO_ONNX)

# Eight unrelated topics: each query's positive is its own passage; the trained negatives are
# the passages of the next topic and the one three further on.
TOPICS = [
    ("how do cats purr", "Cats purr by vibrating the muscles of the larynx while breathing."),
    ("boiling point of water", "Water boils at 100 degrees Celsius at sea level pressure."),
    ("capital of france", "Paris is the capital and largest city of France."),
    (
        "how do airplanes fly",
        "Aircraft wings generate lift as air flows faster over the curved upper surface.",
    ),
    ("what causes tides", "Tides are caused by the gravitational pull of the moon on the oceans."),
    ("python list sorting", "In Python, list.sort() sorts a list in place using Timsort."),
    (
        "photosynthesis in plants",
        "Plants turn sunlight, water and carbon dioxide into glucose by photosynthesis.",
    ),
    ("speed of light", "Light travels through vacuum at about 299,792 kilometres per second."),
]
NEGATIVE_OFFSETS = (1, 3)
MAX_LENGTH = 64


def tiny_pairs() -> list[TrainingPair]:
    pairs = []
    for i, (query, passage) in enumerate(TOPICS):
        pairs.append(TrainingPair(query, passage, 1.0))
        pairs.extend(TrainingPair(query, TOPICS[(i + k) % len(TOPICS)][1], 0.0) for k in NEGATIVE_OFFSETS)
    return pairs


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> TrainReport:
    """24 pairs, 4 epochs of batch 8 (12 steps) at a high learning rate: enough to separate them."""
    out_dir = tmp_path_factory.mktemp("reranker") / "model"
    return train_reranker(
        out_dir=out_dir,
        pairs=tiny_pairs(),
        epochs=4,
        batch_size=8,
        max_length=MAX_LENGTH,
        lr=3e-4,
        warmup=0.0,
        seed=0,
        device="cpu",
        data="tiny inline test set",
    )


@pytest.fixture(scope="session")
def model_dir(trained: TrainReport) -> Path:
    return trained.out_dir


@pytest.fixture(scope="session")
def reranker(model_dir: Path) -> CrossEncoderReranker:
    loaded = load_reranker(str(model_dir), device="cpu")
    assert isinstance(loaded, CrossEncoderReranker)
    return loaded


@pytest.fixture(scope="session")
def onnx_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-data")


@pytest.fixture(scope="session")
def onnx_reranker(model_dir: Path, onnx_data_dir: Path) -> OnnxCrossEncoderReranker:
    """The trained fixture exported to ONNX (once per session, ~10 s on 2 cores)."""
    if not HAS_ONNX:
        pytest.skip(NO_ONNX)
    loaded = load_reranker(str(model_dir), device="cpu", backend="onnx", data_dir=onnx_data_dir)
    assert isinstance(loaded, OnnxCrossEncoderReranker)
    return loaded


@pytest.fixture(params=["torch", pytest.param("onnx", marks=[needs_onnx, pytest.mark.slow])])
def any_reranker(request: pytest.FixtureRequest) -> BatchedCrossEncoder:
    """Each backend in turn, for tests that hold for both."""
    loaded: BatchedCrossEncoder = request.getfixturevalue(
        "reranker" if request.param == "torch" else "onnx_reranker"
    )
    return loaded

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import ConfigError
from rerank import CrossEncoderReranker, Reranker, load_reranker, token_batches
from rerank.scoring import BatchedCrossEncoder
from tests.unit.rerank.conftest import TOPICS

# The briefly trained cross-encoder (tests/unit/rerank/conftest.py): not in ``make unit``.
pytestmark = pytest.mark.integration

PASSAGES = [passage for _, passage in TOPICS]


def test_loads_by_path_and_is_a_reranker(any_reranker: BatchedCrossEncoder) -> None:
    assert isinstance(any_reranker, Reranker)
    assert any_reranker.max_length == 64
    assert any_reranker.device == "cpu"


def test_max_length_override(model_dir: Path) -> None:
    assert load_reranker(str(model_dir), device="cpu", max_length=32).max_length == 32


@pytest.mark.parametrize("name", ["/nonexistent/reranker", "./missing-model", "a/b/c"])
def test_missing_path_is_a_config_error(name: str) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_reranker(name)


def test_folder_without_a_model_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_reranker(str(tmp_path), device="cpu")


def test_scores_follow_the_input_order(any_reranker: BatchedCrossEncoder) -> None:
    scores = any_reranker.score("capital of france", PASSAGES)
    order = [5, 2, 7, 0, 1, 6, 3, 4]
    shuffled = any_reranker.score("capital of france", [PASSAGES[i] for i in order])
    assert np.allclose(shuffled, [scores[i] for i in order], atol=1e-5)


def test_empty_candidates(any_reranker: BatchedCrossEncoder) -> None:
    assert any_reranker.score("q", []) == []
    assert any_reranker.pair_tokens([]) == []


def test_long_passages_are_truncated_to_max_length(any_reranker: BatchedCrossEncoder) -> None:
    long = "the lift of a wing in a slipstream " * 5000
    assert any_reranker.pair_tokens([("wing lift", long)]) == [any_reranker.max_length]
    (score,) = any_reranker.score("wing lift", [long])
    assert np.isfinite(score)


def test_token_capped_batches_score_the_same(model_dir: Path, reranker: CrossEncoderReranker) -> None:
    small = load_reranker(str(model_dir), device="cpu", max_batch_tokens=64)
    pairs = [(q, p) for q, _ in TOPICS[:3] for p in PASSAGES]
    assert np.allclose(small.score_pairs(pairs), reranker.score_pairs(pairs), atol=1e-4)


@given(
    lengths=st.lists(st.integers(min_value=1, max_value=300), max_size=60),
    cap=st.integers(min_value=1, max_value=2000),
    max_pairs=st.integers(min_value=1, max_value=20),
)
def test_token_batches_respect_both_caps(lengths: list[int], cap: int, max_pairs: int) -> None:
    batches = token_batches(lengths, max_batch_tokens=cap, max_batch_pairs=max_pairs)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) <= max_pairs
        if len(batch) > 1:
            assert len(batch) * max(lengths[i] for i in batch) <= cap

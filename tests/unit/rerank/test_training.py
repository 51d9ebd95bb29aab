from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import InvalidInputError
from rerank import TrainingPair, TrainReport, load_reranker, train_reranker, write_model_card
from rerank.training import MODEL_CARD
from testkit.activations import held_for_backward
from tests.unit.rerank.conftest import NEGATIVE_OFFSETS, TOPICS, tiny_pairs

# The briefly trained cross-encoder (tests/unit/rerank/conftest.py): not in ``make unit``.
pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_trained_model_ranks_positives_above_its_negatives(trained: TrainReport, reranker) -> None:
    passages = [passage for _, passage in TOPICS]
    for i, (query, _) in enumerate(TOPICS):
        scores = reranker.score(query, passages)
        negatives = [scores[(i + k) % len(TOPICS)] for k in NEGATIVE_OFFSETS]
        assert scores[i] > max(negatives), query
    assert trained.final_loss < trained.first_loss


def test_report_counts_the_run(trained: TrainReport) -> None:
    assert (trained.pairs, trained.positives, trained.negatives) == (24, 8, 16)
    assert trained.steps == 12 == len(trained.losses)
    assert trained.device == "cpu"


def test_output_is_a_normal_crossencoder_folder(model_dir: Path) -> None:
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(model_dir), device="cpu")
    assert model.num_labels == 1
    assert model.max_seq_length == 64


def test_model_card_records_data_and_eval_table(trained: TrainReport, tmp_path: Path) -> None:
    card = (trained.out_dir / MODEL_CARD).read_text()
    assert "tiny inline test set" in card
    assert "24 (8 positive, 16 negative)" in card
    assert "Not evaluated yet." in card
    copy = TrainReport(**{**{f: getattr(trained, f) for f in TrainReport.__slots__}, "out_dir": tmp_path})
    path = write_model_card(
        copy, eval_results={"first stage": {"ndcg@10": 0.5}, "reranked": {"ndcg@10": 0.6}}
    )
    text = path.read_text()
    assert "| run | ndcg@10 |" in text
    assert "| reranked | 0.6000 |" in text


@pytest.mark.parametrize(
    ("pairs", "kwargs"),
    [
        ([], {}),
        ([TrainingPair("q", "p", 2.0)], {}),
        ([TrainingPair("q", "p", 1.0)], {"warmup": 1.0}),
        ([TrainingPair("q", "p", 1.0)], {"batch_size": 0}),
    ],
)
def test_bad_training_input_is_rejected_before_loading(pairs, kwargs, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError):
        train_reranker(out_dir=tmp_path, pairs=pairs, base="/nonexistent", **kwargs)


@pytest.mark.slow
def test_training_is_deterministic_with_a_seed(tmp_path: Path) -> None:
    pairs = tiny_pairs()[:8]
    runs = [
        train_reranker(
            out_dir=tmp_path / str(i), pairs=pairs, batch_size=4, max_length=32, seed=7, device="cpu"
        )
        for i in range(2)
    ]
    assert runs[0].losses == runs[1].losses
    first, second = (load_reranker(str(r.out_dir), device="cpu") for r in runs)
    assert first.score("cats", ["purr", "tides"]) == second.score("cats", ["purr", "tides"])


@pytest.mark.slow
def test_max_seconds_stops_after_one_step_and_still_saves(tmp_path: Path) -> None:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        report = train_reranker(
            out_dir=tmp_path / "m",
            pairs=tiny_pairs(),
            batch_size=4,
            max_length=32,
            max_seconds=0,
            device="cpu",
        )
    finally:
        torch.set_num_threads(before)
    assert report.steps == 1 and report.stopped_by_time and report.planned_steps == 6
    assert (tmp_path / "m" / MODEL_CARD).exists()


@pytest.mark.slow
def test_micro_batches_bound_the_activations_held_for_backward(tmp_path: Path) -> None:
    """Issue 44: a step held the activations of its whole batch (``ragline adapt``: 16 pairs of
    256 tokens); in micro-batches it holds one micro-batch's, whatever the batch size."""
    pairs = [TrainingPair(f"{q} " * 8, f"{p} " * 8, 1.0) for q, p in TOPICS] * 4
    peaks = {}
    for batch_size in (4, 16):
        with held_for_backward() as held:
            report = train_reranker(
                out_dir=tmp_path / str(batch_size),
                pairs=pairs[:batch_size],
                batch_size=batch_size,
                micro_batch_size=4,
                max_length=64,
                device="cpu",
            )
        assert report.steps == 1 and report.micro_batch_size == 4
        peaks[batch_size] = held.peak
    assert peaks[4] > 0, peaks
    assert peaks[16] < 1.5 * peaks[4], peaks  # 4x the pairs, not 4x the activations

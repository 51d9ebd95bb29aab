"""Bi-encoder fine-tuning for ``ragline adapt``: a few steps, bounded in time, loadable by path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import InvalidInputError
from index.embedder import SentenceTransformerEmbedder, resolve_model_path
from index.embedder_training import MINI_BATCH_SIZE, TRAINING_REPORT, train_embedder
from testkit.activations import held_for_backward

pytestmark = pytest.mark.slow

BASE = resolve_model_path("bundled:all-MiniLM-L6-v2")
TRIPLETS = [
    ("volcano", "Magma rises into the crater.", "Knead the dough."),
    ("bread", "Bake the loaf in a hot oven.", "Ash clouds ground flights."),
    ("tides", "The moon pulls the oceans.", "The knight forks the king."),
    ("chess", "Checkmate follows in two moves.", None),  # no hard negative: in-batch ones only
    ("jazz", "The saxophone improvises over swing.", "Glaciers carve valleys."),
    ("glacier", "Ice grinds the bedrock.", "The bass walks."),
]


@pytest.fixture(autouse=True)
def _one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the CI machine's cores are shared
    yield
    torch.set_num_threads(before)


def test_a_short_run_saves_a_model_the_embedder_loads(tmp_path: Path) -> None:
    out = tmp_path / "embedder"
    report = train_embedder(
        out_dir=out,
        items=TRIPLETS,
        base=BASE,
        batch_size=3,
        max_length=32,
        lr=1e-4,
        device="cpu",
        data="inline",
    )
    assert (report.triplets, report.with_negative, report.steps, report.planned_steps) == (6, 5, 2, 2)
    assert not report.stopped_by_time and report.first_loss is not None
    written = json.loads((out / TRAINING_REPORT).read_text())
    assert written["steps"] == 2 and written["base"] == BASE and "losses" not in written
    loaded = SentenceTransformerEmbedder(str(out), device="cpu")
    vectors = loaded.embed(["volcano", "bread"])
    assert vectors.shape == (2, 384) and loaded.max_tokens == 32


def test_the_time_bound_stops_after_one_step_and_still_saves(tmp_path: Path) -> None:
    report = train_embedder(
        out_dir=tmp_path / "e",
        items=TRIPLETS * 4,
        base=BASE,
        batch_size=2,
        max_length=16,
        max_seconds=0,
        device="cpu",
    )
    assert report.steps == 1 and report.planned_steps == 12 and report.stopped_by_time
    assert (tmp_path / "e" / "config_sentence_transformers.json").exists()
    with pytest.raises(InvalidInputError):
        train_embedder(out_dir=tmp_path / "x", items=[], base=BASE)


def test_activations_held_for_backward_do_not_grow_with_the_batch(tmp_path: Path) -> None:
    """Issue 44: ``ragline adapt`` on 181 examples of real documents peaked at 4.4 GiB, because a
    step kept every text of its batch for the backward pass (3 x 16 texts of 256 tokens). With
    gradient caching, a step holds a mini-batch's activations whatever the batch size."""
    long = [(f"{a} " * 20, f"{p} " * 20, f"{n or p} " * 20) for a, p, n in TRIPLETS] * 3
    peaks, reports = {}, {}
    for batch_size in (4, 16):
        with held_for_backward() as held:
            reports[batch_size] = train_embedder(
                out_dir=tmp_path / str(batch_size),
                items=long[:batch_size],
                base=BASE,
                batch_size=batch_size,
                max_length=64,
                device="cpu",
            )
        peaks[batch_size] = held.peak
    assert peaks[4] > 0, peaks  # the measure saw the mini-batches' passes
    assert peaks[16] < 1.5 * peaks[4], peaks  # 4x the texts, not 4x the activations
    assert all(r.steps == 1 and r.mini_batch_size == MINI_BATCH_SIZE for r in reports.values())

"""bench.common helpers that several benchmarks share."""

from __future__ import annotations

from bench.common import generated_texts


def test_generated_texts_are_deterministic_and_sized() -> None:
    texts = generated_texts(50, 12, seed=3)
    assert texts == generated_texts(50, 12, seed=3)
    assert len(texts) == 50 and all(len(t.split()) == 12 for t in texts)
    assert texts != generated_texts(50, 12, seed=4)

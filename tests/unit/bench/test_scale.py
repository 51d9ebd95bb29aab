"""bench.scale measures a real version: built, on disk, loaded and queried in a fresh process."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.scale import generated_texts, measure


def test_generated_texts_are_deterministic_and_sized() -> None:
    texts = generated_texts(50, 12, seed=3)
    assert texts == generated_texts(50, 12, seed=3)
    assert len(texts) == 50 and all(len(t.split()) == 12 for t in texts)
    assert texts != generated_texts(50, 12, seed=4)


def test_measure_reports_sizes_beside_the_model(tmp_path: Path) -> None:
    args = argparse.Namespace(dim=32, shards=2, words=8, seed=0)
    m = measure(600, args, tmp_path)
    assert m["n"] == 600 and m["kind"] == "flat"
    assert m["build_s"] > 0 and m["disk"] > 600 * 32 * 4  # at least the raw vectors
    assert m["rss"] > 0 and m["rss_est"] > 0 and m["disk_est"] > 0
    assert (tmp_path / "scale-600" / "manifest.json").exists()

"""bench.scale measures a real version: built, on disk, loaded and queried in a fresh process."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.scale import DIM, measure


def test_measure_reports_sizes_beside_the_model(tmp_path: Path) -> None:
    args = argparse.Namespace(shards=2, seed=0, rate=0.0)
    m = measure(600, args, tmp_path)
    assert m["n"] == 600 and m["kind"] == "flat"
    assert m["build_s"] > 0 and m["disk"] > 600 * DIM * 4  # at least the raw vectors
    assert m["rss"] > 0 and m["rss_est"] > 0 and m["disk_est"] > 0
    assert 0 < m["disk_lexical"] < m["disk"]
    assert "p50_0" not in m  # rate 0: no catalog, no server
    assert (tmp_path / "indexes" / "scale-600" / "manifest.json").exists()

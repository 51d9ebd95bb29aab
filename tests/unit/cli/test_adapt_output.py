"""``ragline adapt``'s summary: each model's run and the gated next steps."""

from __future__ import annotations

from pathlib import Path

from cli.adapt import format_report, next_steps
from services.adaptation import AdaptReport

RUN = {
    "steps": 3,
    "seconds": 2.0,
    "device": "cpu",
    "stopped_by_time": True,
    "first_loss": 0.7,
    "final_loss": 0.5,
}


def _report(**overrides: object) -> AdaptReport:
    fields: dict[str, object] = {
        "tenant_id": "acme", "out_dir": "/m/acme", "seed": 0, "max_pairs": 10,
        "passages": 12, "judgements": 1,
        "examples": {"feedback": 1, "title": 4, "heading": 3, "neighbour": 2}, "reranker_pairs": 18,
        "embedder": RUN, "reranker": RUN, "seconds": 5.0, "peak_rss_mib": 900.0, "device": "cpu",
    }  # fmt: skip
    fields.update(overrides)
    return AdaptReport(**fields)  # type: ignore[arg-type]


def test_summary_names_both_runs_and_both_gates() -> None:
    text = format_report(_report())
    assert "tenant acme: 10 examples (feedback 1, title 4, heading 3, neighbour 2) from 12 passages" in text
    assert "embedder: 3 steps in 2.0 s on cpu (stopped by --max-seconds), loss 0.7000 -> 0.5000" in text
    assert next_steps(_report()) == [
        f"ragline reembed --model {Path('/m/acme/embedder')} --tenant acme --wait",
        f"ragline reranker gate --tenant acme --model {Path('/m/acme/reranker')}",
    ]


def test_only_the_trained_models_get_a_next_step() -> None:
    steps = next_steps(_report(embedder=None))
    assert len(steps) == 1 and steps[0].startswith("ragline reranker gate")
    assert "embedder:" not in format_report(_report(embedder=None))

"""What ``ragline eval`` reports: per-mode metrics and latencies, as a table or JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class ModeReport:
    mode: str
    metrics: dict[str, float]  # "ndcg@10", "recall@100", "mrr@10", ... (means over evaluated queries)
    evaluated: int
    skipped: int  # queries without a judged relevant document
    latency_ms_p50: float
    latency_ms_p95: float
    degraded: int  # answers that came back degraded (a leg timed out or failed)
    seconds: float


@dataclass(slots=True)
class EvalReport:
    dataset: str
    tenant: str
    ingest_seconds: float
    ingest_state: str | None
    documents: int
    chunks: int
    index_seconds: float
    modes: list[ModeReport] = field(default_factory=list)
    fusion: dict[str, Any] | None = None  # what the modes fused with (the tenant's default included)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _metric_order(name: str) -> tuple[str, int]:
    """``ndcg@10`` before ``ndcg@100``: by metric, then by cut-off as a number."""
    metric, k = name.split("@")
    return metric, int(k)


def format_table(report: EvalReport) -> str:
    """The report as a Markdown table, one row per mode, under a line on ingest and index."""
    keys = sorted({k for m in report.modes for k in m.metrics}, key=_metric_order)
    head = ["mode", *keys, "p50 ms", "p95 ms", "queries"]
    rows = [
        [
            m.mode,
            *(f"{m.metrics[k]:.4f}" for k in keys),
            f"{m.latency_ms_p50:.1f}",
            f"{m.latency_ms_p95:.1f}",
            str(m.evaluated),
        ]
        for m in report.modes
    ]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join(
        [
            f"{report.dataset}: {report.documents} documents, {report.chunks} chunks;"
            f" ingest {report.ingest_seconds}s ({report.ingest_state}), index {report.index_seconds}s",
            *([f"fusion: {json.dumps(report.fusion, sort_keys=True)}"] if report.fusion else []),
            line(head),
            "|" + "|".join("-" * (w + 2) for w in widths) + "|",
            *map(line, rows),
        ]
    )


def write_json(report: EvalReport, path: Path) -> None:
    path.write_text(json.dumps(report.as_json(), indent=2))

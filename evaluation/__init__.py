"""``ragline eval``: retrieval quality of every search mode on a BEIR-layout collection.

A product feature, not a benchmark: the collection goes through the real job pipeline into
its own tenant, an index version is built if needed, and the queries run through the same
``SearchService`` as ``/v1/retrieve``; the metrics are :mod:`core.ir_metrics` (trec_eval's
definitions). The benchmarks in ``bench/`` (a checkout's tool, not installed) measure speed.

Layer: beside ``api`` (both sit on ``wiring``), below ``cli``, which is its only adapter.
"""

from evaluation.harness import MODES, evaluate, resolve_modes
from evaluation.report import EvalReport, ModeReport, format_table, write_json

__all__ = ["MODES", "EvalReport", "ModeReport", "evaluate", "format_table", "resolve_modes", "write_json"]

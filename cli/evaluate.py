"""``ragline eval``."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

from core.settings import get_settings
from services.tenants import FusionOverride


def register(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("eval", help="nDCG/recall/MRR of every mode on a BEIR-layout collection")
    ev.add_argument("--dataset", type=Path, required=True)
    ev.add_argument(
        "--modes",
        default="lexical,dense,hybrid,hybrid+rerank",
        help="comma-separated: lexical (also bm25), dense, hybrid, hybrid+rerank",
    )
    ev.add_argument("--k", type=int, action="append", help="cut-offs (default 10 and 100)")
    ev.add_argument("--split", default="test")
    ev.add_argument("--agg", choices=["max", "sum"], default="max", help="chunk scores -> document score")
    ev.add_argument("--json", type=Path, help="write the report here")
    fu = ev.add_argument_group(
        "fusion", "override the eval tenant's fusion defaults (themselves over the [retrieve] settings)"
    )
    fu.add_argument("--fusion-method", choices=["rrf", "convex"])
    fu.add_argument("--rrf-k", type=_bounded(int, 1, 10_000))
    fu.add_argument("--dense-weight", type=_bounded(float, 0.0, 1000.0))
    fu.add_argument("--lexical-weight", type=_bounded(float, 0.0, 1000.0))
    fu.add_argument("--dense-candidates", type=_bounded(int, 1, 2000))
    fu.add_argument("--lexical-candidates", type=_bounded(int, 1, 2000))
    ev.set_defaults(handler=_eval)


def _bounded(kind: type[int] | type[float], low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a finite number of ``kind`` in ``[low, high]``, else a usage error."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {kind.__name__}: {text!r}") from None
        if not math.isfinite(value) or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is outside [{low:g}, {high:g}]")
        return value

    return parse


def _fusion(args: argparse.Namespace) -> FusionOverride | None:
    override = FusionOverride(
        method=args.fusion_method,
        rrf_k=args.rrf_k,
        dense_weight=args.dense_weight,
        lexical_weight=args.lexical_weight,
        dense_candidates=args.dense_candidates,
        lexical_candidates=args.lexical_candidates,
    )
    return override if override.given() else None


def _eval(args: argparse.Namespace) -> int:
    from evaluation import evaluate, format_table, write_json

    report = evaluate(
        get_settings(),
        args.dataset,
        modes=[m for m in args.modes.split(",") if m],
        ks=args.k or (10, 100),
        split=args.split,
        agg=args.agg,
        fusion=_fusion(args),
    )
    print(format_table(report))
    if args.json:
        write_json(report, args.json)
    return 0

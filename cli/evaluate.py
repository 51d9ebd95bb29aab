"""``ragline eval``."""

from __future__ import annotations

import argparse
from pathlib import Path

from core.settings import get_settings


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
    ev.set_defaults(handler=_eval)


def _eval(args: argparse.Namespace) -> int:
    from bench.eval import evaluate, format_table, write_json

    report = evaluate(
        get_settings(),
        args.dataset,
        modes=[m for m in args.modes.split(",") if m],
        ks=args.k or (10, 100),
        split=args.split,
        agg=args.agg,
    )
    print(format_table(report))
    if args.json:
        write_json(report, args.json)
    return 0

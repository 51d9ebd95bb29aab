"""``ragline tune``: cross-validated fusion tuning of one tenant (``evaluation.tuning``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from cli.output import add_json_flag, at_least, operator, print_json
from core.settings import get_settings
from services.caller import Caller

if TYPE_CHECKING:
    from evaluation.tuning import TuneReport


def register(sub: argparse._SubParsersAction) -> None:
    tu = sub.add_parser(
        "tune",
        help="search the tenant's fusion settings on judged queries (k-fold CV); apply only a proven gain",
    )
    tu.add_argument("--tenant", required=True)
    tu.add_argument("--dataset", type=Path, help="a BEIR-layout collection, ingested into the tenant")
    tu.add_argument("--from-feedback", action="store_true", help="the tenant's feedback as judgements")
    tu.add_argument("--apply", action="store_true", help="apply the winner even if its interval includes 0")
    tu.add_argument("--folds", type=at_least(2), default=5)
    tu.add_argument("--seed", type=int, default=0, help="the folds' shuffle and the bootstrap's")
    tu.add_argument("--top-k", type=at_least(100), default=100, help="results per scored request (>= 100)")
    tu.add_argument("--split", default="test", help="the dataset's qrels split")
    add_json_flag(tu)
    tu.set_defaults(handler=_tune)


def _tune(args: argparse.Namespace) -> int:
    from evaluation.tuning import tune

    report = tune(
        get_settings(),
        args.tenant,
        Caller(operator(), "cli"),
        dataset=args.dataset,
        from_feedback=args.from_feedback,
        folds=args.folds,
        seed=args.seed,
        top_k=args.top_k,
        force=args.apply,
        split=args.split,
    )
    if args.json:
        print_json(report.as_json())
    else:
        print(format_report(report))
    return 0


def format_report(report: TuneReport) -> str:
    """Per fold: the held-out scores of the setting chosen on the other folds and of the
    current one; then the means, the interval and the decision."""
    lines = [
        f"tenant {report.tenant}: {report.queries} judged queries ({', '.join(report.sources)}),"
        f" {report.settings_tried} settings, {len(report.folds)} folds, top_k {report.top_k}",
        f"current: {json.dumps(report.current, sort_keys=True)}",
        "| fold | queries | nDCG@10 tuned | current | recall@100 tuned | current | chosen |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in report.folds:
        lines.append(
            f"| {f.fold} | {f.queries} | {f.ndcg:.4f} | {f.current_ndcg:.4f} | {f.recall:.4f}"
            f" | {f.current_recall:.4f} | {json.dumps(f.chosen, sort_keys=True)} |"
        )
    lo, hi = report.ndcg_interval
    rlo, rhi = report.recall_interval
    lines += [
        f"held out: nDCG@10 {report.ndcg_mean:.4f} vs {report.current_ndcg_mean:.4f}"
        f" ({report.ndcg_difference:+.4f}, 95% {lo:+.4f}..{hi:+.4f});"
        f" recall@100 {report.recall_mean:.4f} vs {report.current_recall_mean:.4f}"
        f" ({report.recall_difference:+.4f}, 95% {rlo:+.4f}..{rhi:+.4f})",
        f"winner (chosen on all queries; {report.winner_fold_wins} of {len(report.folds)} folds chose it):"
        f" {json.dumps(report.winner, sort_keys=True)}",
        ("applied: " if report.applied else "") + report.reason,
    ]
    return "\n".join(lines)

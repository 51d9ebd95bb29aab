"""``ragline adapt``: fine-tune the embedder and a reranker on one tenant's own text (label-free)."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from cli.output import add_json_flag, operator, print_json
from core.settings import get_settings
from services.caller import Caller

if TYPE_CHECKING:
    from services.adaptation import AdaptReport


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "adapt",
        help="fine-tune the embedder and a reranker on a tenant's own text (no labels, no teacher)",
        description="Mine training pairs from the tenant's stored text (title -> first passages,"
        " heading path -> section, passage -> next passage, BM25 hard negatives, feedback with stored"
        " query text) and fine-tune a bi-encoder (DIR/embedder) and a cross-encoder (DIR/reranker)."
        " Nothing goes live: the embedder through `ragline reembed --model` and its gate, the"
        " reranker through its own gate.",
    )
    p.add_argument("--tenant", required=True)
    p.add_argument("--out", type=Path, required=True, metavar="DIR")
    p.add_argument("--max-pairs", type=_positive, default=4000, help="mined examples at most (default 4000)")
    p.add_argument(
        "--max-seconds", type=float, default=1800.0, help="both training loops together (default 1800)"
    )
    p.add_argument("--epochs", type=_positive, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--base", help="embedder to start from (default: the live index's model)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--no-embedder", action="store_true", help="train the reranker only")
    p.add_argument("--no-reranker", action="store_true", help="train the embedder only")
    add_json_flag(p)
    p.set_defaults(handler=_adapt)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an int: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1")
    return value


def _adapt(args: argparse.Namespace) -> int:
    import psycopg

    from catalog.connect import migrated_url
    from services.adaptation import AdaptOptions, adapt_tenant

    settings = get_settings()
    options = AdaptOptions(
        max_pairs=args.max_pairs,
        max_seconds=args.max_seconds,
        epochs=args.epochs,
        seed=args.seed,
        embedder=not args.no_embedder,
        reranker=not args.no_reranker,
        device=args.device,
        embedder_base=args.base,
        default_model=settings.embedding_model,
    )
    with psycopg.connect(migrated_url(settings)) as conn:
        report = adapt_tenant(
            conn, Caller(operator(), "cli"), tenant_id=args.tenant, out_dir=args.out, options=options
        )
    if args.json:
        print_json({**asdict(report), "next": next_steps(report)})
    else:
        print(format_report(report))
    return 0


def next_steps(report: AdaptReport) -> list[str]:
    """The commands that may put the adapted models to use, each behind its gate."""
    out = Path(report.out_dir).resolve()
    steps = []
    if report.embedder is not None:
        steps.append(f"ragline reembed --model {out / 'embedder'} --tenant {report.tenant_id} --wait")
    if report.reranker is not None:
        steps.append(f"ragline reranker gate --tenant {report.tenant_id} --model {out / 'reranker'}")
    return steps


def format_report(report: AdaptReport) -> str:
    mined = ", ".join(f"{k} {n}" for k, n in report.examples.items())
    lines = [
        f"tenant {report.tenant_id}: {sum(report.examples.values())} examples ({mined}) from"
        f" {report.passages} passages and {report.judgements} judgements"
    ]
    for name, run in (("embedder", report.embedder), ("reranker", report.reranker)):
        if run is not None:
            stopped = " (stopped by --max-seconds)" if run["stopped_by_time"] else ""
            lines.append(
                f"{name}: {run['steps']} steps in {run['seconds']} s on {run['device']}{stopped},"
                f" loss {run['first_loss']:.4f} -> {run['final_loss']:.4f}"
            )
    lines.append(
        f"wall {report.seconds} s, peak RSS {report.peak_rss_mib} MiB; report {report.out_dir}/adapt.json"
    )
    lines += ["next (each gated; nothing is live yet):", *(f"  {s}" for s in next_steps(report))]
    return "\n".join(lines)

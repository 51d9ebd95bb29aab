"""``ragline reranker``: ``train`` a cross-encoder offline from qrels and/or mined pairs;
``gate`` it for a tenant (on only when the tenant's nDCG@10 is no worse with it); ``off``."""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli.output import add_json_flag, at_least, operator, print_json
from core.settings import get_settings
from services.caller import Caller

if TYPE_CHECKING:
    from evaluation.reranker_gate import GateReport


def register(sub: argparse._SubParsersAction) -> None:
    rr = sub.add_parser("reranker", help="train a cross-encoder reranker; gate it per tenant")
    rsub = rr.add_subparsers(dest="reranker_action", required=True)
    train = rsub.add_parser("train", help="fine-tune from BEIR qrels and/or pairs mined from a tenant")
    train.add_argument("--out", type=Path, required=True)
    train.add_argument("--base", help="model to start from (default: the bundled all-MiniLM-L6-v2)")
    train.add_argument("--qrels", type=Path, action="append", default=[], metavar="DATASET_DIR")
    train.add_argument("--mine", metavar="TENANT", help="mine (title/heading, chunk) pairs from a tenant")
    train.add_argument("--max-pairs", type=int, default=4000)
    train.add_argument("--negatives", type=int, default=2)
    train.add_argument("--epochs", type=int, default=1)
    train.add_argument("--batch-size", type=int, default=16)
    train.add_argument("--max-length", type=int, default=160)
    train.add_argument("--lr", type=float, default=1e-4)
    train.add_argument("--seed", type=int, default=0)
    train.set_defaults(handler=_train)
    gate = rsub.add_parser(
        "gate",
        help="measure a reranker on the tenant's judged queries; on for the tenant only when"
        " its nDCG@10 is no worse (exit 1 when it fails: it stays off)",
    )
    gate.add_argument("--tenant", required=True)
    gate.add_argument("--model", type=Path, required=True, help="a CrossEncoder folder")
    gate.add_argument("--dataset", type=Path, help="a BEIR-layout collection, ingested into the tenant")
    gate.add_argument("--from-feedback", action="store_true", help="the tenant's feedback as judgements")
    gate.add_argument("--top-k", type=at_least(10), default=10, help="results per scored request (>= 10)")
    gate.add_argument("--seed", type=int, default=0, help="the bootstrap's")
    gate.add_argument("--split", default="test", help="the dataset's qrels split")
    gate.add_argument("--force-off", action="store_true", help="measure and record, but keep it off")
    add_json_flag(gate)
    gate.set_defaults(handler=_gate)
    off = rsub.add_parser("off", help="turn the tenant's reranker off (not even the server's model)")
    off.add_argument("--tenant", required=True)
    off.set_defaults(handler=_off)


def _mined_docs(tenant: str) -> list[tuple[str, str]]:
    """(query-like text, passage) from a tenant's live chunks: the heading path or title as query."""
    import psycopg

    from catalog.connect import database_url
    from services.tenants import training_pairs

    with psycopg.connect(database_url(get_settings())) as conn:
        return training_pairs(conn, tenant_id=tenant)


def _train(args: argparse.Namespace) -> int:
    from rerank.data import load_beir, pairs_from_corpus, pairs_from_qrels
    from rerank.training import train_reranker, write_model_card

    pairs: list[Any] = []
    sources = []
    for dataset in args.qrels:
        c = load_beir(dataset)
        pairs += pairs_from_qrels(
            c.corpus, c.queries, c.qrels, negatives_per_positive=args.negatives, seed=args.seed
        )
        sources.append(f"qrels:{dataset.name}")
    if args.mine:
        pairs += pairs_from_corpus(
            _mined_docs(args.mine),
            negatives_per_positive=args.negatives,
            seed=args.seed,
            max_pairs=args.max_pairs,
        )
        sources.append(f"mined:{args.mine}")
    if not pairs:
        raise SystemExit("ragline: give --qrels DATASET_DIR and/or --mine TENANT")
    random.Random(args.seed).shuffle(pairs)
    pairs = pairs[: args.max_pairs * (1 + args.negatives)]
    report = train_reranker(
        out_dir=args.out,
        pairs=pairs,
        base=args.base,
        epochs=args.epochs,
        batch_size=args.batch_size,
        max_length=args.max_length,
        seed=args.seed,
        lr=args.lr,
        show_progress=True,
        data=", ".join(sources),
    )
    write_model_card(report)
    print(f"trained {report.steps} steps on {report.pairs} pairs -> {args.out}")
    print(f"use it: RAGLINE_RERANK__MODEL={args.out.resolve()} ragline serve")
    return 0


def _gate(args: argparse.Namespace) -> int:
    from evaluation.reranker_gate import gate

    report = gate(
        get_settings(),
        args.tenant,
        Caller(operator(), "cli"),
        model=args.model,
        dataset=args.dataset,
        from_feedback=args.from_feedback,
        top_k=args.top_k,
        seed=args.seed,
        split=args.split,
        force_off=args.force_off,
    )
    if args.json:
        print_json(report.as_json())
    else:
        print(format_gate(report))
    return 0 if report.passed else 1


def format_gate(report: GateReport) -> str:
    """The numbers, the rule and the decision."""
    lo, hi = report.interval
    verdict = "passed" if report.passed else "FAILED"
    state = "on" if report.enabled else "off" + (" (--force-off)" if report.forced_off else "")
    lat = report.latency
    latency = (
        []
        if lat is None
        else [
            f"rerank latency per query: p50 {lat.p50_ms:.0f} ms, p95 {lat.p95_ms:.0f} ms"
            f" (budget {lat.budget_ms} ms); {lat.reranked} of {lat.queries} reranked"
            f" ({lat.reranked_share:.0%})"
        ]
    )
    return "\n".join(
        [
            f"tenant {report.tenant}: {report.queries} judged queries ({', '.join(report.sources)}),"
            f" top_k {report.top_k}, {report.candidates} candidates reranked, blend {report.blend}",
            f"model: {report.model}",
            f"nDCG@10 without {report.ndcg_without:.4f}, with {report.ndcg_with:.4f}"
            f" ({report.ndcg_difference:+.4f}, 95% {lo:+.4f}..{hi:+.4f});"
            f" {report.unreranked_queries} answers not reranked (over budget or failed)",
            *latency,
            f"rule: {report.rule}",
            *(f"refused: {reason}" for reason in report.refused),
            f"gate {verdict}: the tenant's reranker is {state}",
        ]
    )


def _off(args: argparse.Namespace) -> int:
    import psycopg

    from catalog.connect import migrated_url
    from services.rerankers import turn_off

    with psycopg.connect(migrated_url(get_settings())) as conn:
        row = turn_off(conn, Caller(operator(), "cli"), tenant_id=args.tenant)
    print(f"tenant {row.tenant_id}: reranker off (model {row.model or 'none'})")
    return 0

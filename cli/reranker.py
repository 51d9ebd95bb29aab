"""``ragline reranker train``: fine-tune a cross-encoder offline from qrels and/or mined pairs."""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

from core.settings import get_settings


def register(sub: argparse._SubParsersAction) -> None:
    rr = sub.add_parser("reranker", help="train a cross-encoder reranker")
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

"""``ragline adapt``: a bi-encoder and a cross-encoder fine-tuned on one tenant's own text.

Label-free (issue 22): the examples are mined from the tenant's stored parsed text and its
stored feedback (``rerank.mining``); no teacher model. Nothing here changes what serves: the
embedder goes live only through ``ragline reembed --model DIR/embedder`` and its gate, the
reranker only through its own per-tenant gate. The run is audited as ``model.adapt``.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg

from catalog import audit
from catalog.documents import leaf_texts_in_order
from catalog.feedback import stored_judgements
from catalog.indexes import resolve_alias
from core.errors import InvalidInputError
from core.settings import DEFAULT_EMBEDDING_MODEL
from index.embedder import resolve_model_path
from index.embedder_training import MINI_BATCH_SIZE, train_embedder
from rerank.mining import count_by_kind, mine_examples, reranker_pairs, triplets
from rerank.training import train_reranker
from services.caller import Caller

REPORT = "adapt.json"
# With both models, the embedder's loop gets this share of ``max_seconds``; the reranker the rest.
EMBEDDER_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class AdaptOptions:
    """How much to mine and train; ``max_pairs`` caps the mined examples (query, positive,
    negatives), ``max_seconds`` the two training loops together (model loading and mining
    are outside it)."""

    max_pairs: int = 4000
    max_seconds: float = 1800.0
    epochs: int = 1
    seed: int = 0
    embedder: bool = True
    reranker: bool = True
    negatives: int = 1
    batch_size: int = 16
    # Texts (embedder) and pairs (reranker) run forward and backward at once: what bounds the
    # activations held for a backward pass, whatever ``batch_size`` and the passages' length.
    micro_batch_size: int = MINI_BATCH_SIZE
    # Query plus passage: titles, headings and 48-word neighbour anchors leave a passage most of it.
    reranker_max_length: int = 256
    embedder_lr: float = 2e-5
    reranker_lr: float = 1e-4
    device: str = "auto"
    embedder_base: str | None = None  # None: the live index's model, else ``default_model``
    default_model: str = DEFAULT_EMBEDDING_MODEL
    reranker_base: str | None = None  # None: the bundled MiniLM encoder with a fresh head


@dataclass(frozen=True, slots=True)
class AdaptReport:
    """What ``adapt.json`` holds (and, without the paths' text, the audit entry)."""

    tenant_id: str
    out_dir: str
    seed: int
    max_pairs: int
    passages: int  # live leaf chunks read
    judgements: int  # stored feedback with query text read
    examples: dict[str, int]
    reranker_pairs: int
    embedder: dict[str, Any] | None
    reranker: dict[str, Any] | None
    seconds: float
    peak_rss_mib: float
    device: str


def peak_rss_mib() -> float:
    """This process's peak resident set size: Linux's ``VmHWM`` (the high-water mark of this
    program's own memory), else ``ru_maxrss`` (KiB on Linux, bytes on macOS). Linux keeps
    ``ru_maxrss`` across ``exec``, so a command started by a large process would report its
    parent's peak; ``VmHWM`` starts again at ``exec``."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def _live_model(conn: psycopg.Connection, options: AdaptOptions) -> str:
    if options.embedder_base is not None:
        return options.embedder_base
    live = resolve_alias(conn, alias="live")
    return live.embedding_model if live is not None else options.default_model


def adapt_tenant(
    conn: psycopg.Connection, caller: Caller, *, tenant_id: str, out_dir: Path, options: AdaptOptions
) -> AdaptReport:
    """Mine the tenant's examples, fine-tune the chosen models into ``out_dir/embedder`` and
    ``out_dir/reranker``, write ``out_dir/adapt.json`` and audit ``model.adapt``.

    Raises:
        InvalidInputError: nothing to train (no model chosen, or no live text to mine).
        ConfigError: a base model cannot be loaded.
    """
    if not (options.embedder or options.reranker):
        raise InvalidInputError("nothing to adapt: both --no-embedder and --no-reranker given")
    if options.max_pairs < 1 or options.max_seconds < 0 or options.epochs < 1:
        raise InvalidInputError("max_pairs and epochs must be >= 1, max_seconds >= 0")
    started = time.monotonic()
    with conn.transaction():  # read, then train outside any transaction
        passages = leaf_texts_in_order(conn, tenant_id=tenant_id)
        judgements = stored_judgements(conn, tenant_id=tenant_id)
        base = _live_model(conn, options)
    examples = mine_examples(
        passages, judgements, seed=options.seed, max_examples=options.max_pairs, negatives=options.negatives
    )
    if not examples:
        raise InvalidInputError(f"tenant {tenant_id!r} has no live text to mine training pairs from")
    kinds = count_by_kind(examples)
    sources = (
        ", ".join(f"{n} {k}" for k, n in kinds.items() if n) + f" examples mined from tenant {tenant_id}"
    )
    budget = options.max_seconds
    embedder = None
    if options.embedder:
        share = budget * EMBEDDER_SHARE if options.reranker else budget
        trained = train_embedder(
            out_dir=out_dir / "embedder",
            items=triplets(examples),
            base=resolve_model_path(base),
            epochs=options.epochs,
            batch_size=options.batch_size,
            mini_batch_size=options.micro_batch_size,
            max_seconds=share,
            lr=options.embedder_lr,
            seed=options.seed,
            device=options.device,
            data=sources,
        )
        budget = max(0.0, budget - trained.seconds)
        embedder = {k: v for k, v in asdict(trained).items() if k != "losses"}
    pairs = reranker_pairs(examples)
    reranker = None
    if options.reranker:
        ranked = train_reranker(
            out_dir=out_dir / "reranker",
            pairs=pairs,
            base=options.reranker_base,
            epochs=options.epochs,
            batch_size=options.batch_size,
            micro_batch_size=options.micro_batch_size,
            max_length=options.reranker_max_length,
            seed=options.seed,
            lr=options.reranker_lr,
            device=options.device,
            data=sources,
            max_seconds=budget,
        )
        reranker = {
            k: str(v) if isinstance(v, Path) else v for k, v in asdict(ranked).items() if k != "losses"
        }
    report = AdaptReport(
        tenant_id=tenant_id,
        out_dir=str(out_dir),
        seed=options.seed,
        max_pairs=options.max_pairs,
        passages=len(passages),
        judgements=len(judgements),
        examples=kinds,
        reranker_pairs=len(pairs),
        embedder=embedder,
        reranker=reranker,
        seconds=round(time.monotonic() - started, 1),
        peak_rss_mib=peak_rss_mib(),
        device=(embedder or reranker or {}).get("device", options.device),
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / REPORT).write_text(json.dumps(asdict(report), indent=2) + "\n", encoding="utf-8")
    _audit(conn, caller, report)
    return report


def _audit(conn: psycopg.Connection, caller: Caller, report: AdaptReport) -> None:
    def summary(run: dict[str, Any] | None) -> dict[str, Any] | None:
        keys = ("base", "steps", "seconds", "first_loss", "final_loss", "stopped_by_time")
        return None if run is None else {k: run.get(k) for k in keys}

    with conn.transaction():
        audit.record(
            conn,
            actor=caller.actor,
            action="model.adapt",
            tenant_id=report.tenant_id,
            target=report.tenant_id,
            details={
                "out_dir": report.out_dir,
                "examples": report.examples,
                "embedder": summary(report.embedder),
                "reranker": summary(report.reranker),
                "seconds": report.seconds,
                "peak_rss_mib": report.peak_rss_mib,
                "via": caller.via,
            },
        )

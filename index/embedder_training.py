"""Fine-tune the bi-encoder on (anchor, positive, hard negative) triplets, bounded in time.

The loss is sentence-transformers' MultipleNegativesRankingLoss (Henderson et al. 2017, "Efficient
Natural Language Response Suggestion for Smart Reply"): each anchor must pick its own positive
out of every positive and hard negative of the batch. As in ``rerank.training``, the loop is a
plain PyTorch loop (the sentence-transformers Trainer needs the ``datasets`` package and adds
nothing a single-device fine-tune needs). Training stops at ``max_seconds`` and still saves, so
``ragline adapt`` has a bounded cost on CPU. The output is an ordinary sentence-transformers
folder: ``ragline reembed --model DIR`` loads it by path like any other model (the ONNX backend
exports it from those files on first use).

Memory is bounded too. A step of the plain loss keeps the activations of every text of the
batch for its backward pass (anchors, positives and negatives: 48 texts of up to 256 tokens
at batch 16), and on a tenant of real documents, whose passages fill the 256 tokens, one step
took 4.3 GiB of RSS where 40-word passages took a fraction of it. The loss is therefore the
same one computed by gradient caching (Gao et al. 2021, "Scaling Deep Contrastive Learning
Batch Size under Memory Limited Setup": sentence-transformers'
CachedMultipleNegativesRankingLoss): every text is embedded without a graph, the loss's
gradient is taken on the embeddings, then ``mini_batch_size`` texts at a time are embedded
again with a graph and back-propagated. The gradient is the plain loss's; the activations held
at once are ``mini_batch_size`` texts', whatever the batch size and passage length (one step
of that run: 1.3 GiB). The pass without a graph is one more forward per text (about 20% more
time, as the paper measures).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.backends import resolve_device, seed_everything
from core.errors import ConfigError, InvalidInputError

logger = logging.getLogger(__name__)

TRAINING_REPORT = "ragline_training.json"
_INSTALL_HINT = "training needs torch and sentence-transformers: pip install 'sentence-transformers>=3.0'"
# (anchor, positive, hard negative or None)
Triplet = tuple[str, str, str | None]
# Texts embedded with a graph at once (see the module docstring): 4 of 256 tokens hold about
# 0.3 GiB of activations on MiniLM; a larger one is no faster on CPU.
MINI_BATCH_SIZE = 4


@dataclass(frozen=True, slots=True)
class EmbedderTrainReport:
    """What a bi-encoder fine-tune did; also written beside the model as JSON."""

    out_dir: str
    base: str
    data: str
    triplets: int
    with_negative: int
    epochs: int
    batch_size: int
    mini_batch_size: int
    max_length: int
    lr: float
    seed: int
    device: str
    steps: int
    planned_steps: int
    stopped_by_time: bool
    seconds: float
    first_loss: float | None
    final_loss: float | None
    losses: tuple[float, ...] = field(default=(), repr=False)


def _batches(items: Sequence[Triplet], batch_size: int, rng: random.Random) -> list[list[Triplet]]:
    order = list(range(len(items)))
    rng.shuffle(order)
    return [[items[i] for i in order[s : s + batch_size]] for s in range(0, len(order), batch_size)]


def _columns(batch: Sequence[Triplet]) -> list[list[str]]:
    """Anchors, positives and, when every triplet of the batch has one, hard negatives: the
    loss needs whole columns, and in-batch negatives still teach a batch without them."""
    columns = [[t[0] for t in batch], [t[1] for t in batch]]
    negatives = [t[2] for t in batch]
    if all(n is not None for n in negatives):
        columns.append([n for n in negatives if n is not None])
    return columns


def _load(base: str, *, device: str, max_length: int) -> Any:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError(_INSTALL_HINT) from exc
    try:
        model = SentenceTransformer(base, device=device)
    except Exception as exc:  # OSError, ValueError, HF errors: all mean "cannot load"
        raise ConfigError(f"could not load base embedding model {base!r}: {exc}") from exc
    model.max_seq_length = min(max_length, int(model.max_seq_length or max_length))
    return model


def _fit(
    model: Any,
    items: Sequence[Triplet],
    *,
    epochs: int,
    batch_size: int,
    mini_batch_size: int,
    lr: float,
    seed: int,
    deadline: float,
) -> tuple[list[float], bool]:
    """The training loop; returns every step's loss and whether the deadline stopped it."""
    import torch
    from sentence_transformers.losses import CachedMultipleNegativesRankingLoss
    from sentence_transformers.util import batch_to_device

    rng = random.Random(seed)
    loss_fn = CachedMultipleNegativesRankingLoss(model, mini_batch_size=mini_batch_size)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    losses: list[float] = []
    model.train()
    batches = (batch for _ in range(epochs) for batch in _batches(items, batch_size, rng))
    stopped = False
    for batch in batches:
        # At least one step, so the report has a loss and the saved model is a trained one.
        if losses and time.monotonic() >= deadline:
            stopped = True
            break
        features = [batch_to_device(model.tokenize(column), model.device) for column in _columns(batch)]
        loss = loss_fn(features, None)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.item()))
        if len(losses) % 50 == 0:
            logger.info("embedder training", extra={"step": len(losses), "loss": losses[-1]})
    model.eval()
    return losses, stopped


def train_embedder(
    *,
    out_dir: Path,
    items: Sequence[Triplet],
    base: str,
    epochs: int = 1,
    batch_size: int = 16,
    mini_batch_size: int = MINI_BATCH_SIZE,
    max_length: int = 256,
    max_seconds: float | None = None,
    lr: float = 2e-5,
    seed: int = 0,
    device: str = "auto",
    data: str = "",
) -> EmbedderTrainReport:
    """Fine-tune ``base`` with MultipleNegativesRankingLoss and save it to ``out_dir``.

    Args:
        out_dir: folder to write (created; existing model files are overwritten).
        items: (anchor, positive, hard negative or None) triplets.
        base: a sentence-transformers folder or model name (the live model, resolved).
        epochs: passes over ``items``.
        batch_size: triplets per step; every other positive in the batch is a negative too.
        mini_batch_size: texts embedded with a graph at once: what bounds the activations held
            for the backward pass (the step's gradient does not depend on it).
        max_length: tokens per text (at most the base model's own limit).
        max_seconds: stop training after this long and save what there is; None: no bound.
        lr: AdamW learning rate.
        seed: seeds Python, NumPy and torch, and the shuffling.
        device: ``"auto"`` (CUDA when available), ``"cpu"`` or ``"cuda"``.
        data: one line describing the training data, for the report.

    Returns:
        The run's report, also written to ``out_dir/ragline_training.json``.

    Raises:
        InvalidInputError: no triplets or a bad setting.
        ConfigError: the base model cannot be loaded.
    """
    if not items:
        raise InvalidInputError("no training triplets")
    if (
        epochs < 1
        or batch_size < 2
        or mini_batch_size < 1
        or max_length < 8
        or (max_seconds is not None and max_seconds < 0)
    ):
        raise InvalidInputError(
            "epochs >= 1, batch_size >= 2, mini_batch_size >= 1, max_length >= 8, max_seconds >= 0"
        )
    seed_everything(seed)
    resolved = resolve_device(device)
    started = time.monotonic()
    model = _load(base, device=resolved, max_length=max_length)
    # The bound is on the training loop, as for the reranker; loading is outside it.
    deadline = time.monotonic() + max_seconds if max_seconds is not None else float("inf")
    losses, stopped = _fit(
        model,
        items,
        epochs=epochs,
        batch_size=batch_size,
        mini_batch_size=mini_batch_size,
        lr=lr,
        seed=seed,
        deadline=deadline,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save(str(out_dir))
    tail = losses[-max(1, len(losses) // 10) :]
    report = EmbedderTrainReport(
        out_dir=str(out_dir),
        base=base,
        data=data,
        triplets=len(items),
        with_negative=sum(1 for t in items if t[2] is not None),
        epochs=epochs,
        batch_size=batch_size,
        mini_batch_size=mini_batch_size,
        max_length=int(model.max_seq_length),
        lr=lr,
        seed=seed,
        device=resolved,
        steps=len(losses),
        planned_steps=epochs * ((len(items) + batch_size - 1) // batch_size),
        stopped_by_time=stopped,
        seconds=round(time.monotonic() - started, 1),
        first_loss=losses[0] if losses else None,
        final_loss=sum(tail) / len(tail) if losses else None,
        losses=tuple(losses),
    )
    shown = {k: v for k, v in asdict(report).items() if k != "losses"}
    (out_dir / TRAINING_REPORT).write_text(json.dumps(shown, indent=2) + "\n", encoding="utf-8")
    logger.info("embedder saved", extra={"out_dir": str(out_dir), "steps": report.steps})
    return report

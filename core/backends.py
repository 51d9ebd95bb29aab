"""Choosing a model backend: PyTorch, or ONNX Runtime on an export of the same model.

Shared by the embedder (``index.embedder``) and the reranker (``rerank.cross_encoder``):
both accept ``auto``, ``torch`` or ``onnx`` and resolve ``auto`` the same way. Each keeps
its backends in an explicit ``dict[str, type]`` and looks the resolved name up with
:func:`pick_backend`. Heavy imports (torch, onnx, onnxruntime) happen inside the functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal, TypeVar, get_args

from core.errors import ConfigError

Backend = Literal["torch", "onnx"]
BackendChoice = Literal["auto", "torch", "onnx"]

T = TypeVar("T")


def exporter_available() -> bool:
    """Whether both ``onnx`` (for the exporter) and ``onnxruntime`` import: what ``auto``
    backends need before choosing ONNX."""
    try:
        import onnx  # noqa: F401  (the TorchScript exporter imports it)
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def require_exporter(hint: str) -> None:
    """ConfigError(hint) unless :func:`exporter_available`."""
    if not exporter_available():
        raise ConfigError(hint)


def resolve_device(device: str) -> str:
    """Map ``"auto"`` to ``"cuda"`` when a GPU is visible, else ``"cpu"``; pass others through.

    Without torch, ``auto`` is ``"cpu"``; loading a PyTorch model then fails with its own
    install hint.
    """
    if device != "auto":
        return device
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch so a training run is repeatable on the same hardware."""
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve_backend(backend: str, *, device: str, cache_dir: Path | None, kind: str) -> Backend:
    """The backend a loader will use; ``auto`` is ONNX on CPU when it can be exported.

    ``auto`` picks ONNX when the device resolves to CPU, an export cache folder is given
    (``cache_dir``) and both ``onnxruntime`` and ``onnx`` import; PyTorch otherwise (ONNX
    gives the same outputs and ~3x faster single queries on CPU, measured for the embedder).

    Args:
        backend: ``auto``, ``torch`` or ``onnx``.
        device: the configured device (``auto``, ``cpu``, ``cuda``...).
        cache_dir: where the export lives, or None when the caller has none.
        kind: what is being loaded (``embedding``, ``reranker``), for the error message.

    Raises:
        ConfigError: ``backend`` is none of the choices.
    """
    if backend not in get_args(BackendChoice):
        raise ConfigError(f"unknown {kind} backend {backend!r}; choose one of {get_args(BackendChoice)}")
    if backend == "torch":
        return "torch"
    if backend == "onnx":
        return "onnx"
    if cache_dir is None or resolve_device(device) != "cpu" or not exporter_available():
        return "torch"
    return "onnx"


def pick_backend(registry: Mapping[str, T], backend: str, *, kind: str) -> T:
    """``registry[backend]``, or a ConfigError naming the choices."""
    try:
        return registry[backend]
    except KeyError:
        raise ConfigError(f"unknown {kind} backend {backend!r}; choose one of {tuple(registry)}") from None

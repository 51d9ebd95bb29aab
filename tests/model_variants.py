"""Second embedding models for migration tests, built from the bundled MiniLM at test time.

Each is an ordinary sentence-transformers folder: the same weights with CLS pooling (a
genuinely different, still reasonable embedding), a fixed orthogonal random projection to
256 dimensions (a Dense module), and the same architecture with randomly re-initialised
weights (a model that must fail the quality gate).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _base():
    from sentence_transformers import SentenceTransformer

    from index.embedder import resolve_model_path

    return SentenceTransformer(resolve_model_path("bundled:all-MiniLM-L6-v2"), device="cpu")


def cls_pooling(folder: Path) -> Path:
    model = _base()
    pooling = next(m for m in model if type(m).__name__ == "Pooling")
    if hasattr(pooling, "pooling_mode"):  # sentence-transformers >= 6
        pooling.pooling_mode = "cls"
    else:
        pooling.pooling_mode_mean_tokens = False
        pooling.pooling_mode_cls_token = True
    model.save(str(folder))
    return folder


def projected(folder: Path, dim: int = 256, seed: int = 7) -> Path:
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Dense

    base = _base()
    mods = list(base)
    width = int((getattr(base, "get_embedding_dimension", None) or base.get_sentence_embedding_dimension)())
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((width, width)))
    dense = Dense(width, dim, bias=False, activation_function=torch.nn.Identity())
    with torch.no_grad():
        dense.linear.weight.copy_(torch.from_numpy(q[:dim].astype(np.float32)))  # orthonormal rows
    model = SentenceTransformer(modules=[*mods[:-1], dense, mods[-1]], device="cpu")
    model.save(str(folder))
    return folder


def random_weights(folder: Path, seed: int = 3) -> Path:
    import torch

    model = _base()
    torch.manual_seed(seed)
    with torch.no_grad():  # every weight matrix redrawn (transformers' init skips loaded ones)
        for name, param in model[0].auto_model.named_parameters():
            if param.dim() > 1:
                param.normal_(0.0, 0.02)
            elif name.endswith("bias"):
                param.zero_()
    model.save(str(folder))
    return folder

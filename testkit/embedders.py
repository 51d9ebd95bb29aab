"""An instrumented embedder: the real model with a hook before every encode call."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from index.embedder import Embedder
    from index.tokens import TokenCounter


class HookedEmbedder:
    """The real model, recording each encode call's texts and calling ``before`` ahead of it:
    the fault-injection seam where a test or a benchmark cancels a job, starts another tenant's
    or holds a batch back."""

    def __init__(self, inner: Embedder, before: Callable[[Sequence[str]], None] | None = None) -> None:
        self.inner = inner
        self.model_name, self.dim, self.max_tokens = inner.model_name, inner.dim, inner.max_tokens
        self.before = before
        self.calls: list[list[str]] = []
        self._lock = threading.Lock()  # the runner embeds from several threads

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            self.calls.append(list(texts))
        if self.before is not None:
            self.before(texts)
        return self.inner.embed(texts)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    @property
    def token_counter(self) -> TokenCounter:
        return self.inner.token_counter

    def calls_with(self, word: str) -> int:
        """How many encode calls so far held a text containing ``word``."""
        with self._lock:
            return sum(1 for call in self.calls if any(word in t for t in call))

    def forget_calls(self) -> None:
        with self._lock:
            self.calls.clear()

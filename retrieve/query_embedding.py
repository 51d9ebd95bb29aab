"""Query embedding with dynamic batching across concurrent requests and an LRU cache.

A request's text joins the open batch; the worker sends it when it is full or
``max_wait_ms`` after its first request. The default wait is 0 (continuous batching): a lone
request goes at once, and requests that arrive while a forward pass runs are sent together
in the next one, so batching costs no latency at low load (a fixed 2 ms wait measured +4.6 ms
per query) and still shares passes under load.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from concurrent.futures import Future

import numpy as np

from index.embedder import Embedder


class QueryEmbedder:
    def __init__(
        self, embedder: Embedder, *, max_batch: int = 32, max_wait_ms: float = 0.0, cache_size: int = 10_000
    ) -> None:
        self.embedder = embedder
        self._max_batch = max_batch
        self._max_wait = max_wait_ms / 1000.0
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._pending: list[tuple[str, Future[np.ndarray]]] = []
        self._cond = threading.Condition()
        self._closed = False
        self.batches_sent = 0
        self._thread = threading.Thread(target=self._loop, name="query-embedder", daemon=True)
        self._thread.start()

    def embed(self, text: str, timeout: float = 10.0) -> np.ndarray:
        return self.submit(text).result(timeout=timeout)

    def submit(self, text: str) -> Future[np.ndarray]:
        """The vector of ``text`` as a future: done at once on a cache hit, else batched.

        The caller can do other work (the lexical search) while the model runs.
        """
        future: Future[np.ndarray] = Future()
        with self._cond:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                future.set_result(hit)
                return future
            self._pending.append((text, future))
            self._cond.notify()
        return future

    def _take_batch(self) -> list[tuple[str, Future[np.ndarray]]] | None:
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            if self._closed and not self._pending:
                return None
            deadline = time.monotonic() + self._max_wait
            while len(self._pending) < self._max_batch and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            batch, self._pending = self._pending[: self._max_batch], self._pending[self._max_batch :]
            return batch

    def _loop(self) -> None:
        while (batch := self._take_batch()) is not None:
            texts = list(dict.fromkeys(t for t, _ in batch))
            try:
                vectors = self.embedder.embed(texts)
            except Exception as exc:  # handed to every waiting request
                for _, fut in batch:
                    fut.set_exception(exc)
                continue
            self.batches_sent += 1
            by_text = dict(zip(texts, vectors, strict=True))
            with self._cond:
                for text, vec in by_text.items():
                    self._cache[text] = vec
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
            for text, fut in batch:
                fut.set_result(by_text[text])

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

"""Progress of a long job on stderr: a tqdm bar on a terminal, plain lines in pipes and logs."""

from __future__ import annotations

import time
from typing import TextIO

from tqdm import tqdm

from core.stderr_filter import terminal_stderr


class Progress:
    """Counts documents and chunks; call it as ``progress(documents, chunks)``.

    On a terminal it draws a tqdm bar (documents, chunks/s, ETA). Anywhere else it writes one
    plain line at most every ``line_seconds`` and one at the end, never a carriage return.
    A resumed job starts at ``done`` (what earlier runs finished): the count shows the whole
    job, while rate and ETA come from this run's work only.
    """

    def __init__(
        self,
        total: int,
        *,
        done: int = 0,
        stream: TextIO | None = None,
        line_seconds: float = 5.0,
        unit: str = "doc",
    ) -> None:
        self.total, self.done, self.chunks, self.unit = total, done, 0, unit
        self._start_done = done
        # Past any stderr filter (core.stderr_filter): a terminal stays a terminal for the bar.
        self.stream = stream or terminal_stderr()
        self.started = self._last_line = time.monotonic()
        self.line_seconds = line_seconds
        self._bar: tqdm | None = None
        if self.stream.isatty():
            self._bar = tqdm(
                total=total or None, initial=done, unit=unit, file=self.stream, dynamic_ncols=True, leave=True
            )

    def __call__(self, documents: int, chunks: int) -> None:
        self.done += documents
        self.chunks += chunks
        if self._bar is not None:
            self._bar.update(documents)
            self._bar.set_postfix_str(f"{self.rate:.1f} chunks/s", refresh=False)
            return
        now = time.monotonic()
        if now - self._last_line >= self.line_seconds or (self.total and self.done >= self.total):
            self._last_line = now
            print(self.line(), file=self.stream, flush=True)

    @property
    def rate(self) -> float:
        return self.chunks / max(1e-6, time.monotonic() - self.started)

    def line(self) -> str:
        """``12/30 docs  40 chunks  3.1 chunks/s  ETA 20s`` (no ETA before this run's first document)."""
        elapsed = max(1e-6, time.monotonic() - self.started)
        done = f"{self.done}/{self.total}" if self.total else str(self.done)
        text = f"{done} {self.unit}s  {self.chunks} chunks  {self.rate:.1f} chunks/s"
        this_run = self.done - self._start_done
        if this_run > 0 and self.done < self.total:
            text += f"  ETA {(self.total - self.done) * elapsed / this_run:.0f}s"
        return text

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

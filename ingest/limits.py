"""Per-document limits the ingest stages enforce: binary content and a parse deadline.

The deadline is cooperative: the parsers and the chunker call ``check_deadline`` at their
loop boundaries (a page, a section, a piece), so a document that takes too long fails with
``parse_timeout`` at the next boundary instead of holding its job for minutes. A parser
stuck inside one library call is out of its reach (a worker process with rlimits is).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from contextlib import contextmanager

from core.errors import ParseError

# C0 controls other than tab, newline, carriage return and form feed, plus DEL and the
# replacement character (bytes that did not decode).
_UNPRINTABLE = {c for c in range(32) if chr(c) not in "\t\n\r\f"} | {0x7F, 0xFFFD}
_DELETE_UNPRINTABLE = dict.fromkeys(_UNPRINTABLE)
MAX_UNPRINTABLE_SHARE = 0.05

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "ragline_parse_deadline", default=None
)


@contextmanager
def parse_deadline(seconds: float) -> Iterator[None]:
    """Make ``check_deadline`` fail once ``seconds`` have passed, within this block."""
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def check_deadline() -> None:
    deadline = _DEADLINE.get()
    if deadline is not None and time.monotonic() > deadline:
        raise ParseError("parsing and chunking took longer than the parse timeout", code="parse_timeout")


def remaining_seconds() -> float:
    """Seconds left before the deadline; infinity outside ``parse_deadline``."""
    deadline = _DEADLINE.get()
    return float("inf") if deadline is None else deadline - time.monotonic()


def unprinted_share(text: str, removed_nuls: int = 0) -> float:
    """The share of characters that are control characters, NULs or undecodable bytes."""
    total = len(text) + removed_nuls
    if total == 0:
        return 0.0
    unprintable = len(text) - len(text.translate(_DELETE_UNPRINTABLE)) + removed_nuls
    return unprintable / total


def reject_binary(text: str, removed_nuls: int = 0) -> None:
    """``binary_content`` when more than 5% of the decoded text is not text."""
    share = unprinted_share(text, removed_nuls)
    if share > MAX_UNPRINTABLE_SHARE:
        raise ParseError(
            f"the content looks binary: {share:.0%} control or undecodable characters", code="binary_content"
        )

"""Where a document is parsed: in this process, or in a worker process under rlimits.

A parser is the one stage that runs third-party C code (MuPDF) over untrusted bytes, so a
PDF or HTML bomb must cost one document, not the process that ingests it. ``ParsePool``
(``ingest/parse_pool.py``) runs ``parse_limited`` in worker processes with a memory
ceiling, a CPU ceiling and a wall-clock kill; ``InProcessParser`` runs it here (the
``isolate_parsing = false`` setting, and the unit tests of the stages).

Both answer a whole batch at once (``parse_all``), so a pool with several workers parses
the documents of a batch side by side.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from core.errors import ParseError
from core.records import ParsedDocument, SourceDocument
from ingest.limits import parse_deadline
from ingest.ocr import OcrOptions
from ingest.parse import parse_document

# MuPDF reports an allocation the rlimit refused as "malloc (N bytes) failed" (FzErrorSystem).
_ALLOCATION_FAILED = re.compile(r"\b(?:m|re|c)alloc\b.*\bfailed\b", re.IGNORECASE)
MEMORY_CODE = "parse_memory_limit"
MEMORY_MESSAGE = "parsing needed more memory than the parse memory limit"


@dataclass(frozen=True, slots=True)
class IsolationConfig:
    """How documents are parsed (``IngestSettings`` holds the defaults)."""

    enabled: bool  # parse in worker processes under rlimits
    workers: int  # worker processes per pool (the runner's, and each Ray prepare actor's)
    memory_mb: int  # what one worker may allocate above its idle size (RLIMIT_DATA, RLIMIT_AS)


@dataclass(frozen=True, slots=True)
class ParseRequest:
    """One document to parse, with the limits its parse runs under."""

    source: SourceDocument
    timeout_seconds: float
    max_chars: int  # longer text fails with too_many_chunks before it is returned
    ocr: OcrOptions = OcrOptions()


class Parser(Protocol):
    def parse_all(self, requests: Sequence[ParseRequest]) -> list[ParsedDocument | ParseError]:
        """One answer per request, in order: the parsed document or why it failed."""
        ...

    def close(self) -> None: ...


def parse_limited(request: ParseRequest) -> ParsedDocument:
    """Parse one document under its deadline and size limit; only ``ParseError`` escapes.

    Raises:
        ParseError: any code of ``parse_document``, ``too_many_chunks`` for text longer than
            ``max_chars``, ``parse_timeout``, or ``parse_memory_limit`` when an allocation
            was refused (``MemoryError``, or MuPDF's failed malloc under the rlimit).
    """
    try:
        with parse_deadline(request.timeout_seconds):
            parsed = parse_document(request.source, request.ocr)
    except ParseError as exc:
        if _memory_exhausted(exc):
            raise ParseError(MEMORY_MESSAGE, code=MEMORY_CODE) from None
        raise
    except MemoryError:
        raise ParseError(MEMORY_MESSAGE, code=MEMORY_CODE) from None
    if len(parsed.text) > request.max_chars:
        raise ParseError(
            f"the document's {len(parsed.text)} characters exceed the chunk limit", code="too_many_chunks"
        )
    return _within_limit(parsed, request.max_chars) if parsed.attachments else parsed


def _within_limit(parsed: ParsedDocument, max_chars: int) -> ParsedDocument:
    """An e-mail's attachments each under the same text limit: a longer one costs itself
    (named in the warnings), never the message, and its text never leaves the worker."""
    kept, warnings = [], list(parsed.warnings)
    for attachment in parsed.attachments:
        if len(attachment.parsed.text) > max_chars:
            warnings.append(
                f"attachment_failed: {attachment.filename[:100]} ({attachment.mime_type}, too_many_chunks)"
            )
        else:
            kept.append(attachment)
    return dataclasses.replace(parsed, attachments=tuple(kept), warnings=tuple(warnings))


def _memory_exhausted(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, MemoryError) or _ALLOCATION_FAILED.search(str(seen)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class InProcessParser:
    """Parses in the calling process: no memory ceiling, and a cooperative deadline only."""

    def parse_all(self, requests: Sequence[ParseRequest]) -> list[ParsedDocument | ParseError]:
        out: list[ParsedDocument | ParseError] = []
        for request in requests:
            try:
                out.append(parse_limited(request))
            except ParseError as exc:
                out.append(exc)
        return out

    def close(self) -> None:
        return None

"""Binary and giant input costs one document a reason code, never the job its time:
``binary_content``, ``too_many_chunks``, ``parse_timeout``, and lines too long to tokenize
whole are cut before they are counted."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace
from typing import Any

import pytest

from core.records import Failed, ItemRef, Prepared, SourceDocument
from ingest.pipeline import prepare
from tests.factories import chunking

REF = ItemRef(uuid.uuid4(), 0)
CONFIG = chunking(chunk_tokens=16, overlap_tokens=2)


def _words(text: str) -> int:
    return len(text.split())


def _prepare(data: bytes, mime: str = "text/plain", **config: Any):
    source = SourceDocument("t1", "doc", mime, data)
    return prepare(
        REF, source, current_hash=None, current=None, count_tokens=_words, config=replace(CONFIG, **config)
    )


@pytest.mark.parametrize("mime", ["text/plain", "text/markdown", "text/html"])
def test_random_bytes_are_binary_content(mime: str) -> None:
    data = random.Random(7).randbytes(256 * 1024)
    outcome = _prepare(data, mime)
    assert isinstance(outcome, Failed) and outcome.code == "binary_content", outcome


def test_control_characters_are_binary_content() -> None:
    data = ("ok \x01\x02\x03\x04\x05\x06 " * 2000).encode()
    outcome = _prepare(data)
    assert isinstance(outcome, Failed) and outcome.code == "binary_content"


def test_text_with_a_stray_nul_is_still_text() -> None:
    outcome = _prepare(b"Pump maintenance schedule.\x00 Check the seals monthly. " * 20)
    assert isinstance(outcome, Prepared)
    assert any(w.startswith("stripped_nul") for w in outcome.warnings)


def test_too_many_chunks_fails_the_document() -> None:
    text = " ".join(f"Sentence number {i} talks about valves." for i in range(200)).encode()
    outcome = _prepare(text, max_chunks=5)
    assert isinstance(outcome, Failed) and outcome.code == "too_many_chunks", outcome
    assert isinstance(_prepare(text, max_chunks=1000), Prepared)


def test_parse_timeout_fails_the_document() -> None:
    text = " ".join(f"Sentence number {i} talks about valves." for i in range(2000)).encode()
    outcome = _prepare(text, parse_timeout_seconds=1e-9)
    assert isinstance(outcome, Failed) and outcome.code == "parse_timeout", outcome


@pytest.mark.parametrize("word", ["turbine ", "x"])  # spaced words, then one endless token
def test_a_pathological_line_is_cut_before_it_is_counted(word: str) -> None:
    line = word * (400_000 // len(word))
    counted: list[int] = []

    def counting(text: str) -> int:
        counted.append(len(text))
        return max(1, len(text) // 6)

    source = SourceDocument("t1", "doc", "text/plain", line.encode())
    outcome = prepare(
        REF,
        source,
        current_hash=None,
        current=None,
        count_tokens=counting,
        config=replace(CONFIG, max_chunks=100_000),
    )
    assert isinstance(outcome, Prepared)
    # Halving the whole line counts it ~log2(n) (here 12+) times over; windows a few times.
    assert sum(counted) < 6 * len(line), sum(counted) / len(line)

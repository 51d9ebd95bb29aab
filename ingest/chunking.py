"""Structure-aware chunking into searchable leaves and their parent sections.

Sections are split only as far as needed (section, then sentence or line, then halves at
whitespace) and packed greedily within one heading path, so chunk boundaries fall on
paragraph boundaries whenever the budget allows. Every leaf is an exact span of
``ParsedDocument.text`` and is verified against the real token counter once packed.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from core.errors import InvalidInputError
from core.records import Chunk, ParsedDocument, Section, SectionKind
from ingest.hashing import chunk_id
from ingest.limits import check_deadline

PARENT_FACTOR = 4
_PROSE = frozenset({SectionKind.PARAGRAPH, SectionKind.LIST})
_LINE_BASED = frozenset({SectionKind.TABLE, SectionKind.CODE})
# A sentence ends at . ! or ? (optionally closed by a quote or bracket) before a
# non-lowercase character; a line break always ends one (list items, verse, addresses).
_SENTENCE_BREAK = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))[ \t]+(?=[^a-z\s])|[ \t]*\n\s*")
_LINE_BREAK = re.compile(r"\n")
_WHITESPACE = re.compile(r"\s")
# A span longer than this many characters per token of budget cannot fit: it is cut into
# windows (at whitespace) before anything counts its tokens, so a pathological line costs
# one pass of the tokenizer, not one per halving.
_WINDOW_CHARS_PER_TOKEN = 8


@dataclass(frozen=True, slots=True)
class _Piece:
    """An unbreakable span with its token count."""

    start: int
    end: int
    tokens: int
    kind: SectionKind
    page_start: int | None
    page_end: int | None


@dataclass(frozen=True, slots=True)
class _Span:
    """A packed chunk before it gets its id and ordinal."""

    start: int
    end: int
    tokens: int
    kind: SectionKind
    heading_path: tuple[str, ...]
    page_start: int | None
    page_end: int | None


def chunk_document(
    parsed: ParsedDocument,
    *,
    tenant_id: str,
    external_id: str,
    version: int,
    count_tokens: Callable[[str], int],
    chunk_tokens: int = 256,
    overlap_tokens: int = 32,
) -> list[Chunk]:
    """Split a parsed document into leaf chunks (level 0) and parent chunks (level 1).

    Args:
        parsed: The parsed document.
        tenant_id: Owner of the document, part of every chunk id.
        external_id: The connector's document id, part of every chunk id.
        version: The document version, part of every chunk id.
        count_tokens: Tokens in a string without special tokens (the embedder's tokenizer).
        chunk_tokens: Maximum tokens in a leaf chunk.
        overlap_tokens: Maximum tokens of trailing sentences a leaf repeats from the leaf
            before it in the same section.

    Returns:
        Chunks in document order with ordinals 0..n-1, each parent before its leaves.

    Raises:
        InvalidInputError: The sizes are not positive or the overlap is not below the size.
    """
    if chunk_tokens < 1 or not 0 <= overlap_tokens < chunk_tokens:
        raise InvalidInputError("need chunk_tokens >= 1 and 0 <= overlap_tokens < chunk_tokens")
    packer = _Packer(parsed.text, count_tokens, chunk_tokens, overlap_tokens)
    leaves = [leaf for group in _groups(parsed.sections) for leaf in packer.pack(group)]
    chunks: list[Chunk] = []
    for family in _families(leaves, PARENT_FACTOR * chunk_tokens):
        parent = _parent_span(family, parsed.text, count_tokens)
        parent_chunk = _chunk(parent, parsed.text, tenant_id, external_id, version, len(chunks), 1, None)
        chunks.append(parent_chunk)
        for leaf in family:
            ordinal = len(chunks)
            chunks.append(
                _chunk(leaf, parsed.text, tenant_id, external_id, version, ordinal, 0, parent_chunk.chunk_id)
            )
    return chunks


def _groups(sections: Sequence[Section]) -> Iterator[list[Section]]:
    """Runs of sections sharing a heading path; headings join the content that follows."""
    group: list[Section] = []
    pending: list[Section] = []
    for section in sections:
        if section.kind is SectionKind.HEADING:
            pending.append(section)
            continue
        if pending or not group or group[-1].heading_path != section.heading_path:
            if group:
                yield group
            group, pending = [*pending, section], []
        else:
            group.append(section)
    if group:
        yield group
    if pending:
        # Headings with no content after them (or a document of headings only).
        yield pending


class _Packer:
    """Splits sections into pieces and packs them into leaves under a token budget."""

    def __init__(
        self, text: str, count: Callable[[str], int], chunk_tokens: int, overlap_tokens: int
    ) -> None:
        self._text = text
        self._count = count
        self._limit = chunk_tokens
        self._overlap = overlap_tokens
        self._window = chunk_tokens * _WINDOW_CHARS_PER_TOKEN

    def pack(self, group: list[Section]) -> Iterator[_Span]:
        """Greedily pack a group's pieces into leaves, each starting with the overlap."""
        pieces = [piece for section in group for piece in self._pieces(section)]
        path = group[-1].heading_path
        carried: list[_Piece] = []
        index = 0
        while index < len(pieces):
            head = list(carried)
            while head and _total(head) + pieces[index].tokens > self._limit:
                head.pop(0)
            end, used = index, _total(head)
            while end < len(pieces) and used + pieces[end].tokens <= self._limit:
                used += pieces[end].tokens
                end += 1
            if end < len(pieces) and all(p.kind is SectionKind.HEADING for p in pieces[index:end]):
                # The heading would be a leaf of its own: split what follows so that its
                # first sentences can join the heading.
                finer = self._subdivide(pieces[end])
                if len(finer) > 1:
                    pieces[end : end + 1] = finer
                    continue
            head, end, tokens = self._verify(head, pieces, index, max(end, index + 1))
            yield _span_of([*head, *pieces[index:end]], tokens, path)
            carried = self._trailing_sentences(pieces[index:end])
            index = end

    def _verify(
        self, head: list[_Piece], pieces: list[_Piece], start: int, end: int
    ) -> tuple[list[_Piece], int, int]:
        """Recount the packed text once; drop pieces until the real count fits.

        Counts of pieces are only approximately additive, so the sum can undershoot.
        """
        while True:
            first = head[0] if head else pieces[start]
            tokens = self._count(self._text[first.start : pieces[end - 1].end])
            if tokens <= self._limit or (end - start == 1 and not head):
                return head, end, tokens
            if end - start > 1:
                end -= 1
            else:
                head.pop(0)

    def _pieces(self, section: Section) -> list[_Piece]:
        check_deadline()
        template = _Piece(
            section.char_start, section.char_end, 0, section.kind, section.page_start, section.page_end
        )
        if section.char_end - section.char_start > self._window:
            return self._subdivide(template)
        whole = _Piece(
            section.char_start,
            section.char_end,
            self._count(section.text),
            section.kind,
            section.page_start,
            section.page_end,
        )
        return [whole] if whole.tokens <= self._limit else self._subdivide(whole)

    def _subdivide(self, piece: _Piece) -> list[_Piece]:
        """Split into sentences (lines for tables and code), halving any that still do not fit."""
        pattern = _LINE_BREAK if piece.kind in _LINE_BASED else _SENTENCE_BREAK
        pieces: list[_Piece] = []
        for start, end in _split(self._text, piece.start, piece.end, pattern):
            pieces.extend(self._fit(piece, start, end))
        return pieces

    def _fit(self, template: _Piece, start: int, end: int) -> list[_Piece]:
        """A span that fits, or its halves cut at the whitespace nearest the middle."""
        check_deadline()
        if end - start > self._window:
            return [p for left, right in self._windows(start, end) for p in self._fit(template, left, right)]
        tokens = self._count(self._text[start:end])
        if tokens <= self._limit or end - start <= 1:
            return [_Piece(start, end, tokens, template.kind, template.page_start, template.page_end)]
        cut = _cut_point(self._text, start, end)
        pieces: list[_Piece] = []
        for left, right in ((start, cut), (cut, end)):
            left, right = _strip(self._text, left, right)
            if left < right:
                pieces.extend(self._fit(template, left, right))
        return pieces

    def _windows(self, start: int, end: int) -> Iterator[tuple[int, int]]:
        """``[start, end)`` in spans of at most ``self._window`` characters, cut at the last
        whitespace before each boundary (hard cut inside one endless word)."""
        while end - start > self._window:
            limit = start + self._window
            cut = max(self._text.rfind(" ", start + 1, limit), self._text.rfind("\n", start + 1, limit))
            cut = cut if cut > start else limit
            left, right = _strip(self._text, start, cut)
            if left < right:
                yield left, right
            start = cut
        left, right = _strip(self._text, start, end)
        if left < right:
            yield left, right

    def _trailing_sentences(self, pieces: list[_Piece]) -> list[_Piece]:
        """The last prose sentences of a leaf totalling at most the overlap budget."""
        carried: list[_Piece] = []
        total = 0
        for piece in reversed(pieces):
            if piece.kind not in _PROSE or not self._overlap:
                break
            spans = list(_split(self._text, piece.start, piece.end, _SENTENCE_BREAK))
            for start, end in reversed(spans):
                tokens = piece.tokens if len(spans) == 1 else self._count(self._text[start:end])
                if total + tokens > self._overlap:
                    return carried
                carried.insert(0, _Piece(start, end, tokens, piece.kind, piece.page_start, piece.page_end))
                total += tokens
        return carried


def _split(text: str, start: int, end: int, pattern: re.Pattern[str]) -> Iterator[tuple[int, int]]:
    """Non-blank sub-spans of ``text[start:end]`` between matches of ``pattern``."""
    position = start
    for match in pattern.finditer(text, start, end):
        left, right = _strip(text, position, match.start())
        if left < right:
            yield left, right
        position = match.end()
    left, right = _strip(text, position, end)
    if left < right:
        yield left, right


def _strip(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _cut_point(text: str, start: int, end: int) -> int:
    middle = (start + end) // 2
    right = _WHITESPACE.search(text, middle, end - 1)
    left = max((m.start() for m in _WHITESPACE.finditer(text, start + 1, middle)), default=-1)
    candidates = [position for position in (left, right.start() if right else -1) if position > start]
    if not candidates:
        return middle  # one huge word (a hash, base64): cut it anyway
    return min(candidates, key=lambda position: abs(position - middle))


def _total(pieces: list[_Piece]) -> int:
    return sum(piece.tokens for piece in pieces)


def _span_of(pieces: list[_Piece], tokens: int, path: tuple[str, ...]) -> _Span:
    weights: Counter[SectionKind] = Counter()
    for piece in pieces:
        weights[piece.kind] += piece.end - piece.start
    return _Span(
        start=pieces[0].start,
        end=pieces[-1].end,
        tokens=tokens,
        kind=_dominant(weights),
        heading_path=path,
        page_start=min((p.page_start for p in pieces if p.page_start is not None), default=None),
        page_end=max((p.page_end for p in pieces if p.page_end is not None), default=None),
    )


def _dominant(weights: Counter[SectionKind]) -> SectionKind:
    """The kind covering most characters; headings only win when nothing else is there."""
    content = Counter({kind: weight for kind, weight in weights.items() if kind is not SectionKind.HEADING})
    ranked = (content or weights).most_common(1)
    return ranked[0][0] if ranked else SectionKind.PARAGRAPH


def _families(leaves: list[_Span], cap: int) -> Iterator[list[_Span]]:
    """Consecutive leaves under the same top-level heading, at most ``cap`` tokens a family."""
    family: list[_Span] = []
    used = 0
    for leaf in leaves:
        same_top = family and family[0].heading_path[:1] == leaf.heading_path[:1]
        if family and (not same_top or used + leaf.tokens > cap):
            yield family
            family, used = [], 0
        family.append(leaf)
        used += leaf.tokens
    if family:
        yield family


def _parent_span(family: list[_Span], text: str, count: Callable[[str], int]) -> _Span:
    start, end = family[0].start, family[-1].end
    weights: Counter[SectionKind] = Counter()
    for leaf in family:
        weights[leaf.kind] += leaf.end - leaf.start
    path = family[0].heading_path
    for leaf in family[1:]:
        depth = 0
        while depth < min(len(path), len(leaf.heading_path)) and path[depth] == leaf.heading_path[depth]:
            depth += 1
        path = path[:depth]
    return _Span(
        start=start,
        end=end,
        tokens=count(text[start:end]),
        kind=_dominant(weights),
        heading_path=path,
        page_start=min((leaf.page_start for leaf in family if leaf.page_start is not None), default=None),
        page_end=max((leaf.page_end for leaf in family if leaf.page_end is not None), default=None),
    )


def _chunk(
    span: _Span,
    text: str,
    tenant_id: str,
    external_id: str,
    version: int,
    ordinal: int,
    level: int,
    parent_id: str | None,
) -> Chunk:
    return Chunk(
        chunk_id=chunk_id(tenant_id, external_id, version, span.start, span.end, level),
        ordinal=ordinal,
        text=text[span.start : span.end],
        token_count=span.tokens,
        char_start=span.start,
        char_end=span.end,
        heading_path=span.heading_path,
        page_start=span.page_start,
        page_end=span.page_end,
        kind=span.kind,
        level=level,
        parent_id=parent_id,
    )

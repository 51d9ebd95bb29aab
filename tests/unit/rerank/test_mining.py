"""Label-free pair mining for ``ragline adapt``: which pairs, where negatives come from."""

from __future__ import annotations

import pytest

from catalog.documents import LeafText
from core.errors import InvalidInputError
from rerank.mining import count_by_kind, mine_examples, reranker_pairs, triplets

# Two documents of two sections each and a third, untitled one without headings.
PASSAGES = [
    LeafText(1, "a0", 0, "Volcano eruptions", ("Magma",), "Magma rises through the crust into the crater."),
    LeafText(1, "a1", 1, "Volcano eruptions", ("Ash",), "Ash clouds from the volcano ground flights."),
    LeafText(2, "b0", 0, "Baking bread", ("Dough",), "Knead the dough until the gluten is elastic."),
    LeafText(2, "b1", 1, "Baking bread", ("Oven",), "Bake the bread in a hot oven until the crust is brown."),
    LeafText(3, "c0", 0, "", (), "Volcano crust magma ash crater bread oven: an index of words."),
    LeafText(3, "c1", 1, "", (), "The crater of the volcano glows at night."),
]


def _keys(examples):
    return sorted((e.kind, e.query, e.positive) for e in examples)


def test_structure_gives_title_heading_and_neighbour_pairs() -> None:
    examples = mine_examples(PASSAGES, negatives=0)
    assert count_by_kind(examples) == {"feedback": 0, "title": 4, "heading": 4, "neighbour": 3}
    keys = _keys(examples)
    assert ("title", "Volcano eruptions", PASSAGES[0].text) in keys
    assert ("heading", "Oven", PASSAGES[3].text) in keys
    # the tail of a passage asks for the next passage of the same document, never across documents
    assert ("neighbour", PASSAGES[4].text, PASSAGES[5].text) in keys
    assert not any(e.kind == "neighbour" and e.positive == PASSAGES[2].text for e in examples)


def test_negatives_never_come_from_the_positives_document() -> None:
    examples = mine_examples(PASSAGES, negatives=2, seed=3)
    by_text = {p.text: p.doc_id for p in PASSAGES}
    assert any(e.negatives for e in examples)
    for e in examples:
        assert all(by_text[n] != e.doc_id for n in e.negatives), e


def test_mining_is_deterministic_by_seed_and_bounded() -> None:
    first = mine_examples(PASSAGES, negatives=1, seed=7, max_examples=5)
    assert first == mine_examples(PASSAGES, negatives=1, seed=7, max_examples=5)
    assert len(first) == 5
    # the cap takes the kinds in turns: every kind with candidates is represented
    counts = count_by_kind(first)
    assert counts["title"] >= 1 and counts["heading"] >= 1 and counts["neighbour"] >= 1
    with pytest.raises(InvalidInputError):
        mine_examples(PASSAGES, negatives=-1)


def test_feedback_pairs_need_stored_query_text_and_a_live_passage() -> None:
    judgements = [
        ("lava flow", 1, "a1", 2),  # a chunk judged relevant
        ("lava flow", 2, "b0", 0),  # the same query's not-relevant chunk: its first negative
        ("sourdough", 2, None, 1),  # a whole document: its first passage stands for it
        ("  ", 1, "a0", 3),  # no query text: nothing to learn from
        ("ghost", 9, None, 3),  # a document that is not live
        ("only negative", 1, "a0", 0),  # no positive: no example
    ]
    examples = [e for e in mine_examples(PASSAGES, judgements, negatives=1) if e.kind == "feedback"]
    assert _keys(examples) == [
        ("feedback", "lava flow", PASSAGES[1].text),
        ("feedback", "sourdough", PASSAGES[2].text),
    ]
    lava = next(e for e in examples if e.query == "lava flow")
    assert lava.negatives[0] == PASSAGES[2].text


def test_pairs_and_triplets_for_both_models() -> None:
    examples = mine_examples(PASSAGES, negatives=1, seed=1)
    pairs = reranker_pairs(examples)
    assert sum(p.label == 1.0 for p in pairs) == len(examples)
    assert sum(p.label == 0.0 for p in pairs) == sum(len(e.negatives) for e in examples)
    assert [(a, p) for a, p, _ in triplets(examples)] == [(e.query, e.positive) for e in examples]

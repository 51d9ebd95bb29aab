"""Label-free training examples mined from a tenant's own parsed text, for ``ragline adapt``.

No labels and no teacher model: the structure of the tenant's documents stands in for queries
(docs/benchmarks.md, "Why the mined reranker lowers nDCG": titles alone are unlike real
queries, so headings and neighbouring passages are used as well):

- ``title``: a document's title asks for its first passages;
- ``heading``: a heading path asks for one (seeded) passage of its section;
- ``neighbour``: the tail of a passage asks for the next passage of the same document;
- ``feedback``: a stored query (kept only when the deployment stores query text) asks for a
  chunk or document judged relevant; the same query's not-relevant judgements are its first
  negatives.

Hard negatives come from BM25 over the same passages, sampled (with the seed) from the top
``depth`` hits and never from the positive's own document, whose other passages are often
relevant too.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from catalog.documents import LeafText
from core.errors import InvalidInputError
from rerank.data import TrainingPair, _Bm25, _pseudo_query

KINDS = ("feedback", "title", "heading", "neighbour")
# The neighbour anchor is the end of a passage, the part that leads into the next one; a whole
# passage as the "query" would leave a cross-encoder's max_length no room for the passage.
NEIGHBOUR_WORDS = 48
# A (query text, doc_id, chunk_id or None for the whole document, grade) judgement.
Judgement = tuple[str, int, str | None, int]


@dataclass(frozen=True, slots=True)
class MinedExample:
    """A pseudo-query, its positive passage (from document ``doc_id``) and hard negatives."""

    kind: str
    query: str
    positive: str
    doc_id: int
    negatives: tuple[str, ...] = ()


def _by_document(passages: Sequence[LeafText]) -> dict[int, list[LeafText]]:
    docs: dict[int, list[LeafText]] = defaultdict(list)
    for p in passages:
        if p.text.strip():
            docs[p.doc_id].append(p)
    return {d: sorted(ps, key=lambda p: p.ordinal) for d, ps in sorted(docs.items())}


def _title_examples(docs: dict[int, list[LeafText]], first: int) -> list[MinedExample]:
    out = []
    for doc_id, ps in docs.items():
        for p in ps[:first]:
            query, body = _pseudo_query(p.title, p.text)
            if p.title.strip() and body:
                out.append(MinedExample("title", query, body, doc_id))
    return out


def _heading_examples(docs: dict[int, list[LeafText]], rng: random.Random) -> list[MinedExample]:
    out = []
    for doc_id, ps in docs.items():
        sections: dict[tuple[str, ...], list[LeafText]] = defaultdict(list)
        for p in ps:
            if any(s.strip() for s in p.section_path):
                sections[p.section_path].append(p)
        for path, members in sections.items():
            chosen = members[rng.randrange(len(members))]
            out.append(
                MinedExample("heading", " ".join(s.strip() for s in path if s.strip()), chosen.text, doc_id)
            )
    return out


def _neighbour_examples(docs: dict[int, list[LeafText]]) -> list[MinedExample]:
    out = []
    for doc_id, ps in docs.items():
        for prev, nxt in zip(ps, ps[1:], strict=False):
            anchor = " ".join(prev.text.split()[-NEIGHBOUR_WORDS:])
            if anchor and anchor != nxt.text.strip():
                out.append(MinedExample("neighbour", anchor, nxt.text, doc_id))
    return out


def _feedback_examples(
    docs: dict[int, list[LeafText]], judgements: Iterable[Judgement], min_grade: int
) -> list[MinedExample]:
    """Positives of judged queries, each with the same query's not-relevant texts as negatives."""
    by_chunk = {p.chunk_id: p for ps in docs.values() for p in ps}

    def text_of(doc_id: int, chunk_id: str | None) -> str | None:
        if chunk_id is None:  # a whole document: its first passage stands for it
            return docs[doc_id][0].text if docs.get(doc_id) else None
        found = by_chunk.get(chunk_id)
        return found.text if found is not None and found.doc_id == doc_id else None

    positives: dict[str, list[tuple[int, str]]] = defaultdict(list)
    negatives: dict[str, list[str]] = defaultdict(list)
    for query, doc_id, chunk_id, grade in sorted(judgements, key=lambda j: (j[0], j[1], j[2] or "", j[3])):
        text = text_of(doc_id, chunk_id)
        if not query.strip() or text is None:
            continue
        if grade >= min_grade:
            positives[query].append((doc_id, text))
        elif grade == 0:
            negatives[query].append(text)
    return [
        MinedExample("feedback", query, text, doc_id, tuple(negatives[query]))
        for query in sorted(positives)
        for doc_id, text in positives[query]
    ]


def _bounded(
    pools: dict[str, list[MinedExample]], max_examples: int | None, rng: random.Random
) -> list[MinedExample]:
    """Every pool shuffled, then taken in turns so a cap keeps all kinds (feedback first)."""
    for pool in pools.values():
        rng.shuffle(pool)
    if max_examples is None:
        return [e for kind in KINDS for e in pools[kind]]
    taken: list[MinedExample] = []
    cursors = dict.fromkeys(KINDS, 0)
    while len(taken) < max_examples and any(cursors[k] < len(pools[k]) for k in KINDS):
        for kind in KINDS:
            if cursors[kind] < len(pools[kind]) and len(taken) < max_examples:
                taken.append(pools[kind][cursors[kind]])
                cursors[kind] += 1
    return taken


def mine_examples(
    passages: Sequence[LeafText],
    judgements: Sequence[Judgement] = (),
    *,
    seed: int = 0,
    max_examples: int | None = None,
    negatives: int = 1,
    depth: int = 20,
    title_passages: int = 2,
    min_grade: int = 1,
) -> list[MinedExample]:
    """Training examples from a tenant's leaf passages (document order) and stored judgements.

    Args:
        passages: the tenant's live leaf chunks (``catalog.documents.leaf_texts_in_order``).
        judgements: (query, doc_id, chunk_id or None, grade) with stored query text.
        seed: makes the choice of heading passages, the cap, negatives and the order repeatable.
        max_examples: cap on the examples (kinds taken in turns); None for all.
        negatives: BM25 hard negatives per example (after a feedback example's own).
        depth: how far down the BM25 ranking negatives are drawn from.
        title_passages: how many first passages of a document its title asks for.
        min_grade: the lowest feedback grade counted relevant (``relevant`` is stored as 1);
            grade 0 (``not_relevant``) is a negative.

    Returns:
        Examples in a seeded shuffled order.

    Raises:
        InvalidInputError: a negative count, depth or cap out of range.
    """
    if negatives < 0 or depth < 1 or title_passages < 0 or (max_examples is not None and max_examples < 0):
        raise InvalidInputError("negatives, title_passages, max_examples >= 0 and depth >= 1")
    rng = random.Random(seed)
    docs = _by_document(passages)
    pools = {
        "feedback": _feedback_examples(docs, judgements, min_grade),
        "title": _title_examples(docs, title_passages),
        "heading": _heading_examples(docs, rng),
        "neighbour": _neighbour_examples(docs),
    }
    chosen = _bounded(pools, max_examples, rng)
    flat = [p for ps in docs.values() for p in ps]
    with_negatives = _add_negatives(chosen, flat, negatives=negatives, depth=depth, rng=rng)
    rng.shuffle(with_negatives)
    return with_negatives


def _add_negatives(
    examples: list[MinedExample], flat: list[LeafText], *, negatives: int, depth: int, rng: random.Random
) -> list[MinedExample]:
    if negatives == 0 or not flat or not examples:
        return examples
    bm25 = _Bm25([p.text for p in flat])
    out = []
    for e in examples:
        own = set(e.negatives) | {e.positive}
        ranked = [
            flat[i].text
            for i in bm25.top(e.query, depth * 3)
            if flat[i].doc_id != e.doc_id and flat[i].text not in own
        ]
        pool = list(dict.fromkeys(ranked))[:depth]
        picked = (
            pool
            if len(pool) <= negatives
            else [pool[i] for i in sorted(rng.sample(range(len(pool)), negatives))]
        )
        out.append(MinedExample(e.kind, e.query, e.positive, e.doc_id, (*e.negatives, *picked)))
    return out


def reranker_pairs(examples: Sequence[MinedExample]) -> list[TrainingPair]:
    """(query, positive) labelled 1.0 and (query, negative) 0.0 for the cross-encoder."""
    return [
        pair
        for e in examples
        for pair in (
            TrainingPair(e.query, e.positive, 1.0),
            *(TrainingPair(e.query, n, 0.0) for n in e.negatives),
        )
    ]


def triplets(examples: Sequence[MinedExample]) -> list[tuple[str, str, str | None]]:
    """(anchor, positive, first hard negative or None) for the bi-encoder."""
    return [(e.query, e.positive, e.negatives[0] if e.negatives else None) for e in examples]


def count_by_kind(examples: Iterable[MinedExample]) -> dict[str, int]:
    """Examples per kind, every kind present (0 when none)."""
    counts = dict.fromkeys(KINDS, 0)
    for e in examples:
        counts[e.kind] += 1
    return counts

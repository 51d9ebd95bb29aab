"""Training data for the reranker: BEIR collections and (query, passage, label) pair mining.

Negatives are BM25 "hard" negatives: lexically close to the query, so the cross-encoder has
to learn more than word overlap. They are sampled (with a seed) from the top of the BM25
ranking rather than taken from the very top, because the top unjudged hits of a collection
are often relevant documents nobody judged.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.errors import ConfigError, InvalidInputError

_TOKEN = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True, slots=True)
class TrainingPair:
    """One supervised example: ``label`` is 1.0 for relevant, 0.0 for not relevant."""

    query: str
    passage: str
    label: float


@dataclass(frozen=True, slots=True)
class BeirCollection:
    """A BEIR-layout test collection held in memory."""

    name: str
    docs: dict[str, tuple[str, str]]  # doc id -> (title, text)
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]

    @property
    def corpus(self) -> dict[str, str]:
        """Doc id -> title and text joined, skipping documents with neither."""
        joined = {doc_id: f"{title}\n{text}".strip() for doc_id, (title, text) in self.docs.items()}
        return {doc_id: text for doc_id, text in joined.items() if text}


def load_beir(root: Path, *, split: str = "test") -> BeirCollection:
    """The collection in memory, read with the evaluation harness's loader.

    Args:
        root: the collection folder, e.g. ``../shared/data/cranfield``.
        split: the qrels file to read.

    Returns:
        The collection; qrels keep every judged grade, including 0.

    Raises:
        ConfigError: a file is missing.
    """
    from core.beir import load_beir as load_collection

    try:
        collection = load_collection(root, split=split)
        docs = {d.doc_id: (d.title or "", d.text or "") for d in collection.iter_corpus()}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"BEIR collection not found or unreadable at {root}: {exc}") from exc
    qrels = {q: dict(judged) for q, judged in collection.qrels.items()}
    return BeirCollection(name=root.name, docs=docs, queries=dict(collection.queries), qrels=qrels)


def tokenize(text: str) -> list[str]:
    """Lower-cased ``\\w+`` tokens, the same rule as the collections' reference BM25."""
    return _TOKEN.findall(text.lower())


class _Bm25:
    """A bm25s index over a fixed list of texts, queried by position."""

    def __init__(self, texts: Sequence[str]) -> None:
        import bm25s

        self._size = len(texts)
        self._index = bm25s.BM25(k1=0.9, b=0.4)
        self._index.index([tokenize(t) for t in texts], show_progress=False)

    def top(self, query: str, k: int) -> list[int]:
        """Positions of the best ``k`` texts with a positive score, best first."""
        tokens = tokenize(query)
        if not tokens or self._size == 0:
            return []
        docs, scores = self._index.retrieve([tokens], k=min(k, self._size), show_progress=False)
        return [int(d) for d, s in zip(docs[0], scores[0], strict=True) if s > 0]


def _sample(candidates: list[int], count: int, rng: random.Random) -> list[int]:
    return candidates if len(candidates) <= count else rng.sample(candidates, count)


def pairs_from_qrels(
    corpus: Mapping[str, str],
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    negatives_per_positive: int = 2,
    seed: int = 0,
    min_grade: int = 1,
    depth: int = 30,
) -> list[TrainingPair]:
    """Labelled pairs from judgements: judged positives, plus BM25 hard negatives.

    Negatives are sampled from the BM25 top ``depth`` for the query, never from documents
    judged relevant (grade >= ``min_grade``) for it.

    Args:
        corpus: doc id -> text (empty texts are skipped).
        queries: query id -> text.
        qrels: query id -> doc id -> grade.
        negatives_per_positive: negatives drawn per positive of a query.
        seed: makes sampling and the output order reproducible.
        min_grade: lowest grade counted as relevant.
        depth: how far down the BM25 ranking negatives are drawn from.

    Returns:
        Pairs in a seeded shuffled order.
    """
    if negatives_per_positive < 0 or depth < 1:
        raise InvalidInputError("negatives_per_positive must be >= 0 and depth >= 1")
    rng = random.Random(seed)
    doc_ids = sorted(doc_id for doc_id, text in corpus.items() if text.strip())
    bm25 = _Bm25([corpus[d] for d in doc_ids])
    pairs: list[TrainingPair] = []
    for qid in sorted(qrels):
        query = queries.get(qid, "").strip()
        relevant = {d for d, grade in qrels[qid].items() if grade >= min_grade}
        positives = sorted(d for d in relevant if corpus.get(d, "").strip())
        if not query or not positives:
            continue
        pairs.extend(TrainingPair(query, corpus[d], 1.0) for d in positives)
        wanted = negatives_per_positive * len(positives)
        ranked = [doc_ids[i] for i in bm25.top(query, depth + len(relevant))]
        # Duplicated documents under other ids would be false negatives: compare text too.
        texts = {corpus[d] for d in positives}
        candidates = [d for d in ranked if d not in relevant and corpus[d] not in texts][:depth]
        negatives = sorted(_sample(list(range(len(candidates))), wanted, rng))
        pairs.extend(TrainingPair(query, corpus[candidates[i]], 0.0) for i in negatives)
    rng.shuffle(pairs)
    return pairs


def _pseudo_query(title: str, body: str) -> tuple[str, str]:
    """(query, positive passage) from a document: its title, else its first sentence."""
    title, body = title.strip(), body.strip()
    if title:
        # Some collections (cranfield) repeat the title at the head of the body; left there, the
        # positive would be a verbatim match and teach the model nothing.
        # Only a whole repeated sentence is cut: "flutter" must not eat "flutter of a wing".
        rest = body[len(title) :]
        if body.lower().startswith(title.lower()) and (title[-1] in ".!?:" or rest[:1] in ("", ".", "\n")):
            body = rest.lstrip(" .\n")
        return title, body
    # Without a title the first sentence asks and the rest answers; a one-sentence body yields
    # an empty positive and the document is skipped.
    parts = _SENTENCE_END.split(body, maxsplit=1)
    return parts[0], parts[1] if len(parts) > 1 else ""


def pairs_from_corpus(
    docs: Sequence[tuple[str, str]],
    *,
    negatives_per_positive: int = 2,
    seed: int = 0,
    max_pairs: int | None = None,
    depth: int = 20,
) -> list[TrainingPair]:
    """Unlabelled mining: each document's title (or first sentence) queries its own body.

    The document's body is the positive; negatives are sampled from the BM25 top ``depth``
    bodies for that query, excluding the document itself and exact duplicates of its body.

    Args:
        docs: (title, body) of each document.
        negatives_per_positive: negatives per document.
        seed: makes sampling and the output order reproducible.
        max_pairs: cap on the pairs returned (documents are sampled to fit); None for all.
        depth: how far down the BM25 ranking negatives are drawn from.

    Returns:
        Pairs in a seeded shuffled order.
    """
    if negatives_per_positive < 0 or depth < 1:
        raise InvalidInputError("negatives_per_positive must be >= 0 and depth >= 1")
    rng = random.Random(seed)
    examples = [_pseudo_query(title, body) for title, body in docs]
    usable = [i for i, (query, body) in enumerate(examples) if query and body]
    if max_pairs is not None:
        usable = sorted(_sample(usable, max(0, max_pairs // (1 + negatives_per_positive)), rng))
    bodies = [body for _, body in examples]
    bm25 = _Bm25(bodies)
    pairs: list[TrainingPair] = []
    for i in usable:
        query, body = examples[i]
        pairs.append(TrainingPair(query, body, 1.0))
        ranked = [j for j in bm25.top(query, depth + 1) if j != i and bodies[j] != body and bodies[j]]
        for j in sorted(_sample(ranked[:depth], negatives_per_positive, rng)):
            pairs.append(TrainingPair(query, bodies[j], 0.0))
    rng.shuffle(pairs)
    if max_pairs is not None:
        pairs = pairs[:max_pairs]
    return pairs

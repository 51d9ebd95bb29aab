"""Lexical scores do not depend on the segment a document sits in: every shard and the
delta score with one set of collection statistics (document frequencies, document count
and average length summed over all segments), as distributed engines do."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from index.bm25_shards import LexicalShard, LexicalStats
from index.tokenize import Tokenizer

TOK = Tokenizer()
OLD = [
    "pump pressure drops when the intake valve sticks",
    "replace the pump seal every spring",
    "valve housing torque settings",
    "cooling fan schedule for the north hall",
    "fan belt tension and alignment",
    "intake filter cleaning procedure",
    "pressure gauge calibration steps",
    "north hall access badge rules",
]
NEW = ["bearing lubrication for the pump gearbox", "gearbox bearing noise diagnosis"]
QUERIES = ["bearing lubrication pump", "pump pressure", "gearbox noise north hall", "valve"]


def _scores(shards: list[tuple[LexicalShard, np.ndarray]], query: str) -> dict[int, float]:
    stats = LexicalStats.total(shard.stats(query) for shard, _ in shards)
    out: dict[int, float] = {}
    for shard, rows in shards:
        scores, pos = shard.search(query, 100, allowed=None, stats=stats)
        out.update({int(rows[p]): float(s) for s, p in zip(scores, pos, strict=True)})
    return out


@pytest.mark.parametrize("query", QUERIES)
def test_split_segments_score_like_one_collection(query: str, tmp_path: Path) -> None:
    texts = OLD + NEW
    whole = LexicalShard.build(texts, np.arange(len(texts)), TOK)
    a_rows, b_rows, d_rows = np.arange(0, 5), np.arange(5, 8), np.arange(8, 10)
    shard_a = LexicalShard.build(OLD[:5], a_rows, TOK)
    shard_b = LexicalShard.build(OLD[5:], b_rows, TOK)
    shard_a.save(tmp_path / "a")
    loaded_a = LexicalShard.load(tmp_path / "a")  # the per-shard tables survive save/load
    delta = LexicalShard.build(NEW, d_rows, TOK)
    reference = _scores([(whole, np.arange(len(texts)))], query)
    split = _scores([(loaded_a, a_rows), (shard_b, b_rows), (delta, d_rows)], query)
    assert reference and split.keys() == reference.keys()
    for row, score in reference.items():
        assert split[row] == pytest.approx(score, rel=1e-5), (row, query)
    # Without shared statistics the delta's tiny corpus gives its documents other scores.
    local = {}
    for shard, rows in ((loaded_a, a_rows), (shard_b, b_rows), (delta, d_rows)):
        s, p = shard.search(query, 100, allowed=None)
        local.update({int(rows[i]): float(v) for v, i in zip(s, p, strict=True)})
    assert local.keys() == reference.keys()


def test_a_fresh_document_ranks_as_after_a_rebuild() -> None:
    texts = OLD + NEW
    whole = LexicalShard.build(texts, np.arange(len(texts)), TOK)
    old = LexicalShard.build(OLD, np.arange(8), TOK)
    delta = LexicalShard.build(NEW, np.arange(8, 10), TOK)
    query = "bearing lubrication pump"
    rebuilt = sorted(_scores([(whole, np.arange(10))], query).items(), key=lambda kv: -kv[1])
    fresh = sorted(
        _scores([(old, np.arange(8)), (delta, np.arange(8, 10))], query).items(), key=lambda kv: -kv[1]
    )
    assert [r for r, _ in fresh] == [r for r, _ in rebuilt]
    assert rebuilt[0][0] == 8  # the fresh runbook with the query's exact words comes first


@pytest.mark.parametrize("query", QUERIES)
def test_statistics_within_a_mask_score_like_that_subset_alone(query: str) -> None:
    """``stats(within=)`` counts only the masked documents (one tenant's): a mixed shard
    scores them exactly as a shard of theirs alone would, whatever the others contain."""
    mine = OLD[:5] + NEW
    theirs = ["pump pump pump bearing valve", "north hall gearbox lubrication", "valve valve pressure"]
    texts = mine[:3] + theirs + mine[3:]
    rows = np.arange(len(texts))
    within = np.array([not (3 <= i < 6) for i in range(len(texts))])
    mixed = LexicalShard.build(texts, rows, TOK)
    alone_rows = rows[within]
    alone = LexicalShard.build(mine, alone_rows, TOK)
    stats = mixed.stats(query, within=within)
    reference = _scores([(alone, alone_rows)], query)
    scores, pos = mixed.search(query, 100, allowed=within, stats=stats)
    got = {int(rows[p]): float(s) for s, p in zip(scores, pos, strict=True)}
    assert got.keys() == reference.keys() and reference
    for row, score in reference.items():
        assert got[row] == pytest.approx(score, rel=1e-5), (row, query)
    assert stats.n_docs == int(within.sum())
    with pytest.raises(Exception, match="within"):
        mixed.stats(query, within=within[:-1])

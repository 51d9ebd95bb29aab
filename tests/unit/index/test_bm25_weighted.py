"""``LexicalShard.search_terms``: a weighted query of index terms, each term's BM25 as
``search`` scores it, times its weight (what RM3's expanded query model is searched with)."""

from __future__ import annotations

import numpy as np
import pytest

from index.bm25_shards import LexicalShard, LexicalStats
from index.tokenize import Tokenizer

TOK = Tokenizer()
TEXTS = [
    "pump pressure drops when the intake valve sticks",
    "replace the pump seal every spring",
    "valve housing torque settings",
    "cooling fan schedule for the north hall",
    "pump pump pump gearbox",
]
ROWS = np.arange(100, 100 + len(TEXTS), dtype=np.int64)


@pytest.fixture(scope="module")
def shard() -> LexicalShard:
    return LexicalShard.build(TEXTS, ROWS, TOK)


def _as_dict(scores: np.ndarray, pos: np.ndarray) -> dict[int, float]:
    return {int(p): float(s) for s, p in zip(scores, pos, strict=True)}


@pytest.mark.parametrize("with_stats", [False, True])
def test_query_counts_as_weights_give_search_scores(shard: LexicalShard, with_stats: bool) -> None:
    query = "pump valve pump"
    stats = shard.stats(query) if with_stats else None
    plain = _as_dict(*shard.search(query, 10, allowed=None, stats=stats))
    weighted = _as_dict(*shard.search_terms({"pump": 2.0, "valv": 1.0}, 10, allowed=None, stats=stats))
    assert plain.keys() == weighted.keys() and plain
    for pos, score in plain.items():
        assert weighted[pos] == pytest.approx(score, rel=1e-5)


def test_score_is_weighted_sum_of_single_term_scores(shard: LexicalShard) -> None:
    pump = _as_dict(*shard.search("pump", 10, allowed=None))
    valve = _as_dict(*shard.search("valve", 10, allowed=None))
    got = _as_dict(*shard.search_terms({"pump": 0.7, "valv": 0.3, "unknownterm": 5.0}, 10, allowed=None))
    for pos in pump.keys() | valve.keys():
        assert got[pos] == pytest.approx(0.7 * pump.get(pos, 0.0) + 0.3 * valve.get(pos, 0.0), rel=1e-5)
    order = [int(p) for p in shard.search_terms({"pump": 0.7, "valv": 0.3}, 10, allowed=None)[1]]
    assert order == sorted(got, key=lambda p: -got[p])


def test_mask_and_nonpositive_weights(shard: LexicalShard) -> None:
    allowed = np.array([False, True, True, True, False])
    _, pos = shard.search_terms({"pump": 1.0, "valv": 1.0}, 10, allowed=allowed)
    assert set(pos.tolist()) == {1, 2}  # 0 and 4 match but are masked out
    assert len(shard.search_terms({"pump": 0.0, "valv": -1.0}, 10, allowed=None)[1]) == 0


def test_term_stats_equal_stats_of_analysed_text(shard: LexicalShard) -> None:
    within = np.array([True, True, False, True, True])
    from_text = shard.stats("pumps valves gearbox", within=within)
    from_terms = shard.term_stats(["pump", "valv", "gearbox"], within=within)
    assert from_text == from_terms
    assert from_terms.df == {"pump": 3, "valv": 1, "gearbox": 1}
    assert LexicalStats.total([from_terms]).n_docs == 4

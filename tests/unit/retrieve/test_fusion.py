"""Tests for retrieve.fusion: worked RRF examples and hypothesis properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.records import Hit
from retrieve.fusion import FusedHit, convex, rrf, single_list


def _hits(source: str, chunk_ids: list[int]) -> list[Hit]:
    # Scores descend with rank, as a real retriever's would; RRF must only look at ranks.
    return [Hit(chunk_id=cid, score=100.0 - i, source=source) for i, cid in enumerate(chunk_ids)]


def _order(fused: list[FusedHit]) -> list[int]:
    return [hit.chunk_id for hit in fused]


# Several lists, each a permutation prefix of distinct ids, each with its own source name.
ranked_lists = st.lists(
    st.lists(st.integers(min_value=0, max_value=30), max_size=15, unique=True),
    min_size=1,
    max_size=4,
).map(lambda lists: [_hits(f"s{i}", ids) for i, ids in enumerate(lists)])


def test_worked_example_with_k_60() -> None:
    dense = _hits("dense", [1, 2, 3])
    lexical = _hits("bm25", [3, 1, 4])
    fused = rrf([dense, lexical], k=60)
    # 1: 1/61 + 1/62 = 0.032522;  3: 1/63 + 1/61 = 0.032266;  2: 1/62;  4: 1/63
    assert _order(fused) == [1, 3, 2, 4]
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 62)
    assert fused[1].score == pytest.approx(1 / 63 + 1 / 61)
    assert fused[0].stage_ranks == {"dense": 1, "bm25": 2}
    assert fused[0].stage_scores == {"dense": 100.0, "bm25": 99.0}
    assert fused[3].stage_ranks == {"bm25": 3}


def test_weights_scale_each_list() -> None:
    fused = rrf([_hits("dense", [1, 2]), _hits("bm25", [2, 1])], k=0, weights=[1.0, 3.0])
    # k=0: 1 -> 1/1 + 3/2 = 2.5;  2 -> 1/2 + 3/1 = 3.5
    assert _order(fused) == [2, 1]
    assert [hit.score for hit in fused] == pytest.approx([3.5, 2.5])


def test_ties_break_on_best_rank_then_chunk_id() -> None:
    # 5 and 7 both score 1/61 + 1/62 and both have best rank 1: the smaller chunk_id wins.
    fused = rrf([_hits("a", [7, 5]), _hits("b", [5, 7])])
    assert fused[0].score == fused[1].score
    assert _order(fused) == [5, 7]
    # k=0: 1 -> 1/1 = 1.0; 8 -> 0.5/1 = 0.5; 9 -> 1/2 = 0.5. 8 and 9 tie; 8's best rank (1)
    # beats 9's (2).
    fused = rrf([_hits("a", [8]), _hits("b", [1, 9])], k=0, weights=[0.5, 1.0])
    assert _order(fused) == [1, 8, 9]
    assert fused[1].score == fused[2].score == 0.5
    # Same tie with the ids swapped: the best rank still decides, not the chunk id.
    fused = rrf([_hits("a", [9]), _hits("b", [1, 8])], k=0, weights=[0.5, 1.0])
    assert _order(fused) == [1, 9, 8]


def test_duplicates_within_a_list_keep_the_best_rank() -> None:
    hits = [Hit(4, 0.9, "dense"), Hit(6, 0.8, "dense"), Hit(4, 0.1, "dense"), Hit(2, 0.05, "dense")]
    fused = rrf([hits])
    assert _order(fused) == [4, 6, 2]
    by_id = {hit.chunk_id: hit for hit in fused}
    assert by_id[4].stage_ranks == {"dense": 1}
    assert by_id[4].stage_scores == {"dense": 0.9}
    assert by_id[2].stage_ranks == {"dense": 3}  # the dropped copy takes no rank


def test_limit_and_empty_lists() -> None:
    assert rrf([]) == []
    assert rrf([[], []]) == []
    assert _order(rrf([_hits("a", [1, 2, 3])], limit=2)) == [1, 2]
    assert rrf([_hits("a", [1])], limit=0) == []


@pytest.mark.parametrize(
    ("lists", "kwargs"),
    [
        ([_hits("a", [1])], {"k": -1}),
        ([_hits("a", [1])], {"weights": [1.0, 1.0]}),
        ([_hits("a", [1])], {"weights": [-1.0]}),
        ([_hits("a", [1])], {"weights": [math.nan]}),
        ([_hits("a", [1])], {"limit": -1}),
        ([_hits("a", [1]), _hits("a", [2])], {}),
        ([[Hit(1, 1.0, "a"), Hit(2, 1.0, "b")]], {}),
    ],
)
def test_invalid_arguments_raise(lists: list[list[Hit]], kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        rrf(lists, **kwargs)  # type: ignore[arg-type]


def test_single_list_keeps_order_and_original_scores() -> None:
    hits = [Hit(3, 0.7, "dense"), Hit(1, 0.9, "dense"), Hit(3, 0.2, "dense"), Hit(8, 0.1, "dense")]
    fused = single_list(hits)
    assert _order(fused) == [3, 1, 8]
    assert [hit.score for hit in fused] == [0.7, 0.9, 0.1]
    assert [hit.stage_ranks["dense"] for hit in fused] == [1, 2, 3]
    assert _order(single_list(hits, limit=1)) == [3]
    assert all(isinstance(hit, FusedHit) for hit in fused)


@settings(max_examples=150, deadline=None)
@given(ranked_lists, st.randoms(use_true_random=False))
def test_order_independent_of_list_order(lists: list[list[Hit]], rnd: object) -> None:
    shuffled = list(lists)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert rrf(shuffled) == rrf(lists)


@settings(max_examples=150, deadline=None)
@given(ranked_lists)
def test_result_is_a_permutation_of_the_union(lists: list[list[Hit]]) -> None:
    fused = _order(rrf(lists))
    assert sorted(fused) == sorted({hit.chunk_id for hits in lists for hit in hits})
    assert len(fused) == len(set(fused))


@settings(max_examples=150, deadline=None)
@given(ranked_lists, st.integers(min_value=0, max_value=30))
def test_chunk_at_rank_one_everywhere_wins(lists: list[list[Hit]], winner: int) -> None:
    forced = [
        [Hit(winner, 1.0, f"s{i}")] + [hit for hit in hits if hit.chunk_id != winner]
        for i, hits in enumerate(lists)
    ]
    assert rrf(forced)[0].chunk_id == winner


@settings(max_examples=150, deadline=None)
@given(ranked_lists, ranked_lists)
def test_zero_weight_removes_a_list(lists: list[list[Hit]], extra: list[list[Hit]]) -> None:
    renamed = [[Hit(hit.chunk_id, hit.score, f"x{i}") for hit in hits] for i, hits in enumerate(extra)]
    weights = [1.0] * len(lists) + [0.0] * len(renamed)
    assert rrf(lists + renamed, weights=weights) == rrf(lists)


@settings(max_examples=100, deadline=None)
@given(ranked_lists, st.integers(min_value=0, max_value=100))
def test_scores_monotone_in_rank(lists: list[list[Hit]], k: int) -> None:
    for hits in lists:
        scores = [hit.score for hit in rrf([hits], k=k)]
        assert all(a > b for a, b in zip(scores, scores[1:], strict=False))
    # Moving a chunk up one place in one list never lowers its fused score.
    target = lists[0]
    if len(target) >= 2:
        moved = [target[1], target[0], *target[2:]]
        before = {hit.chunk_id: hit.score for hit in rrf(lists, k=k)}
        after = {hit.chunk_id: hit.score for hit in rrf([moved, *lists[1:]], k=k)}
        assert after[target[1].chunk_id] > before[target[1].chunk_id]
        assert after[target[0].chunk_id] < before[target[0].chunk_id]


# --- convex fusion (Bruch et al. 2023): weighted sum of per-list min-max normalised scores ---


def _scored(source: str, pairs: list[tuple[int, float]]) -> list[Hit]:
    return [Hit(chunk_id=cid, score=score, source=source) for cid, score in pairs]


DENSE = _scored("dense", [(1, 0.90), (2, 0.80), (3, 0.50)])
LEXICAL = _scored("lexical", [(3, 20.0), (4, 12.0), (1, 10.0)])


def test_convex_worked_example() -> None:
    # dense min-max over [0.5, 0.9]: 1 -> 1, 2 -> 0.75, 3 -> 0
    # lexical min-max over [10, 20]: 3 -> 1, 4 -> 0.2, 1 -> 0
    fused = convex([DENSE, LEXICAL])
    # 1: 1 + 0 = 1;  3: 0 + 1 = 1;  2: 0.75;  4: 0.2.  1 and 3 tie; both have best rank 1: id.
    assert _order(fused) == [1, 3, 2, 4]
    assert [hit.score for hit in fused] == pytest.approx([1.0, 1.0, 0.75, 0.2])
    assert fused[1].stage_scores == {"dense": 0.5, "lexical": 20.0}
    assert fused[1].stage_ranks == {"dense": 3, "lexical": 1}


def test_convex_weights_move_the_order_as_the_formula_says() -> None:
    # w_dense=1, w_lexical=3: 1 -> 1;  3 -> 3;  2 -> 0.75;  4 -> 0.6
    fused = convex([DENSE, LEXICAL], weights=[1.0, 3.0])
    assert _order(fused) == [3, 1, 2, 4]
    assert [hit.score for hit in fused] == pytest.approx([3.0, 1.0, 0.75, 0.6])
    # w_dense=3, w_lexical=1: 1 -> 3;  2 -> 2.25;  3 -> 1;  4 -> 0.2
    fused = convex([DENSE, LEXICAL], weights=[3.0, 1.0])
    assert _order(fused) == [1, 2, 3, 4]
    assert [hit.score for hit in fused] == pytest.approx([3.0, 2.25, 1.0, 0.2])
    # Weights are relative: scaling both keeps the order and scales every score.
    assert _order(convex([DENSE, LEXICAL], weights=[6.0, 2.0])) == [1, 2, 3, 4]


def test_convex_uses_score_gaps_where_rrf_sees_only_ranks() -> None:
    # Same ranks, different gaps: lexical is far surer of 2 than dense is of 1.
    dense = _scored("dense", [(1, 0.81), (2, 0.80), (9, 0.10)])
    lexical = _scored("lexical", [(2, 30.0), (1, 1.0), (9, 0.0)])
    # convex: 1 -> (0.71/0.71) + 1/30 = 1.0333;  2 -> 0.70/0.71 + 1 = 1.9859
    assert _order(convex([dense, lexical]))[:2] == [2, 1]
    assert convex([dense, lexical])[0].score == pytest.approx(0.70 / 0.71 + 1.0)
    # rrf k=60: 1 and 2 both 1/61 + 1/62, the tie goes to the smaller id.
    assert _order(rrf([dense, lexical], k=60))[:2] == [1, 2]


def test_convex_a_flat_list_scales_to_one_and_weight_zero_drops_a_list() -> None:
    flat = _scored("lexical", [(5, 3.0), (6, 3.0)])
    fused = convex([_scored("dense", [(6, 0.4), (7, 0.2)]), flat])
    # 6: 1 + 1 = 2;  5: 0 + 1 = 1;  7: 0 + 0 = 0
    assert _order(fused) == [6, 5, 7]
    assert [hit.score for hit in fused] == pytest.approx([2.0, 1.0, 0.0])
    assert convex([DENSE, LEXICAL], weights=[1.0, 0.0]) == convex([DENSE])


@pytest.mark.parametrize(
    ("lists", "kwargs"),
    [
        ([[Hit(1, math.nan, "a")]], {}),
        ([[Hit(1, math.inf, "a")]], {}),
        ([DENSE, LEXICAL], {"weights": [1.0]}),
        ([DENSE, LEXICAL], {"weights": [-1.0, 1.0]}),
        ([DENSE, DENSE], {}),
    ],
)
def test_convex_rejects_bad_input(lists: list[list[Hit]], kwargs: dict) -> None:
    with pytest.raises(ValueError):
        convex(lists, **kwargs)


@given(ranked_lists)
@settings(max_examples=50, deadline=None)
def test_convex_scores_stay_within_the_weight_sum(lists: list[list[Hit]]) -> None:
    fused = convex(lists, weights=[2.0] * len(lists))
    assert all(0.0 <= hit.score <= 2.0 * len(lists) + 1e-9 for hit in fused)
    assert len(fused) == len({hit.chunk_id for hits in lists for hit in hits})

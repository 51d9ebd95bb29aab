"""The cross-validation math of ``ragline tune`` on pinned small examples."""

from __future__ import annotations

import random

import pytest

from evaluation import cv


def test_kfold_is_a_deterministic_partition_independent_of_input_order() -> None:
    ids = [f"q{i}" for i in range(11)]
    folds = cv.kfold(ids, 3, seed=7)
    shuffled = ids[:]
    random.Random(1).shuffle(shuffled)
    assert cv.kfold(shuffled, 3, seed=7) == folds
    assert sorted(q for f in folds for q in f) == sorted(ids)  # every id exactly once
    assert sorted(len(f) for f in folds) == [3, 4, 4]
    # Pinned: the shuffle is random.Random(seed) over the sorted ids, dealt round-robin.
    expected = sorted(ids)
    random.Random(7).shuffle(expected)
    assert folds == [sorted(expected[i::3]) for i in range(3)]
    assert cv.kfold(ids, 3, seed=8) != folds


def test_kfold_refuses_too_few_queries_or_folds() -> None:
    with pytest.raises(ValueError, match="cannot fill"):
        cv.kfold(["a", "b"], 3, seed=0)
    with pytest.raises(ValueError, match="at least 2"):
        cv.kfold(["a", "b"], 1, seed=0)


def test_bootstrap_is_deterministic_and_brackets_the_mean() -> None:
    diffs = [0.1, 0.2, -0.05, 0.3, 0.0, 0.15, 0.05, 0.25]
    low, high = cv.bootstrap_interval(diffs, samples=1000, seed=3)
    assert (low, high) == cv.bootstrap_interval(diffs, samples=1000, seed=3)
    assert low < cv.mean(diffs) < high
    assert -0.05 <= low and high <= 0.3  # a mean of resamples stays within the values
    # All equal: the interval is that value.
    assert cv.bootstrap_interval([0.0] * 5, samples=200, seed=0) == (0.0, 0.0)
    assert cv.bootstrap_interval([0.2] * 5, samples=200, seed=0) == pytest.approx((0.2, 0.2))


def test_bootstrap_percentiles_pinned() -> None:
    # Two values 0 and 1, n=1: each resample is one draw, so the means are 0s and 1s and
    # the 2.5% / 97.5% percentiles are 0 and 1.
    assert cv.bootstrap_interval([0.0, 1.0], samples=400, seed=0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        cv.bootstrap_interval([])


def test_best_setting_maximises_mean_then_secondary_then_earliest_row() -> None:
    ndcg = [[0.5, 0.5], [0.6, 0.4], [0.2, 0.9]]
    recall = [[0.1, 0.1], [0.9, 0.9], [0.0, 0.0]]
    assert cv.best_setting(ndcg, recall, [0, 1]) == 2  # means 0.5, 0.5, 0.55
    assert cv.best_setting(ndcg, recall, [0]) == 1
    # rows 0 and 1 tie on column-mean nDCG over [0, 1] without row 2: recall breaks it
    assert cv.best_setting(ndcg[:2], recall[:2], [0, 1]) == 1
    # full tie: the earlier row (the current setting is row 0, so a tie keeps it)
    assert cv.best_setting([[0.5], [0.5]], [[0.1], [0.1]], [0]) == 0


def test_cross_validate_scores_each_query_with_a_setting_chosen_without_it() -> None:
    # 4 queries, 2 folds. Row 1 is better on queries a, b; row 2 on c, d; row 0 is current.
    ids = ["a", "b", "c", "d"]
    ndcg = [[0.5, 0.5, 0.5, 0.5], [0.9, 0.9, 0.1, 0.1], [0.1, 0.1, 0.9, 0.9]]
    recall = [[0.0] * 4, [0.0] * 4, [0.0] * 4]
    folds = cv.kfold(ids, 2, seed=0)
    result = cv.cross_validate(ndcg, recall, 0, ids, k=2, seed=0, samples=500)
    position = {q: i for i, q in enumerate(ids)}
    for f, held in zip(result.folds, folds, strict=True):
        train = [position[q] for q in ids if q not in held]
        assert f.chosen == cv.best_setting(ndcg, recall, train)
        assert f.ndcg == pytest.approx(cv.mean([ndcg[f.chosen][position[q]] for q in held]))
        assert f.current_ndcg == pytest.approx(0.5)
        for q in held:
            assert result.ndcg_differences[position[q]] == pytest.approx(ndcg[f.chosen][position[q]] - 0.5)
    # On all queries rows 1 and 2 tie on nDCG (0.5 mean, as row 0): row 0 wins the tie.
    assert result.final == 0


def test_cross_validate_finds_a_setting_that_is_better_everywhere() -> None:
    ids = [f"q{i}" for i in range(20)]
    ndcg = [[0.4] * 20, [0.7] * 20, [0.5] * 20]
    recall = [[0.5] * 20, [0.6] * 20, [0.5] * 20]
    result = cv.cross_validate(ndcg, recall, 0, ids, k=5, seed=1)
    assert [f.chosen for f in result.folds] == [1] * 5
    assert result.final == 1
    assert result.interval == pytest.approx((0.3, 0.3))
    assert result.recall_interval == pytest.approx((0.1, 0.1))


def test_grid_depths_start_at_top_k_and_convex_weights_sum_to_one() -> None:
    space = cv.grid(100)
    assert len(space) == len(set(space))
    assert {o.dense_candidates for o in space} == {100, 200}
    assert {o.method for o in space} == {"rrf", "convex"}
    for o in space:
        if o.method == "convex":
            assert o.rrf_k is None
            assert (o.dense_weight or 0) + (o.lexical_weight or 0) == pytest.approx(1.0)


def test_cross_validate_with_choices_keeps_the_trick_on() -> None:
    # Row 0 (current) is best everywhere; without it among the choices each fold takes the
    # better of rows 1 and 2 on its training queries, and the difference is measured as lost.
    ids = [f"q{i}" for i in range(10)]
    ndcg = [[0.6] * 10, [0.5] * 10, [0.4] * 10]
    recall = [[0.5] * 10, [0.5] * 10, [0.5] * 10]
    free = cv.cross_validate(ndcg, recall, 0, ids, k=5, seed=0)
    assert [f.chosen for f in free.folds] == [0] * 5 and free.interval == (0.0, 0.0)
    on = cv.cross_validate(ndcg, recall, 0, ids, k=5, seed=0, choices=[1, 2])
    assert [f.chosen for f in on.folds] == [1] * 5 and on.final == 1
    assert on.interval == pytest.approx((-0.1, -0.1))
    assert cv.best_setting(ndcg, recall, list(range(10)), [2]) == 2

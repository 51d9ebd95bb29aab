"""bench.ranking's pure parts: held-out rows per query, paired comparisons, grid overrides."""

from __future__ import annotations

import pytest

from bench.ranking import compare, held_out, override_of
from catalog.fusion import FusionOverride
from evaluation import cv

IDS = [f"q{i}" for i in range(10)]


def test_held_out_scores_each_query_by_the_row_its_fold_chose() -> None:
    # Row 1 has the best nDCG@10 on every query: every fold chooses it (row 2's recall is
    # only the tie-break).
    ndcg = [[0.2] * 10, [0.5] * 10, [0.1] * 10]
    recall = [[0.3] * 10, [0.3] * 10, [0.9] * 10]
    h = held_out(ndcg, recall, IDS)
    assert h.rows == [1] * 10 and h.fold_rows == [1] * 5
    assert h.ndcg == [0.5] * 10 and h.recall == [0.3] * 10


def test_held_out_uses_the_other_folds_only() -> None:
    # Row 1 wins on the queries of fold 0 only: fold 0 (trained without them) keeps row 0,
    # every other fold (trained with them) chooses row 1.
    fold0 = set(cv.kfold(IDS, 5, 0)[0])
    ndcg = [[0.5] * 10, [0.9 if q in fold0 else 0.5 for q in IDS]]
    recall = [[0.0] * 10, [0.0] * 10]
    h = held_out(ndcg, recall, IDS)
    assert h.fold_rows == [0, 1, 1, 1, 1]
    assert [r for q, r in zip(IDS, h.rows, strict=True) if q in fold0] == [0, 0]
    assert h.ndcg == [0.5] * 10  # row 1 ties row 0 wherever it was chosen


def test_compare_pairs_per_query() -> None:
    c = compare([0.5, 0.7, 0.9], [0.4, 0.6, 0.8])
    assert c.mean == pytest.approx(0.7)
    assert c.difference == pytest.approx(0.1)
    assert c.interval[0] == pytest.approx(0.1) and c.interval[1] == pytest.approx(0.1)
    with pytest.raises(ValueError):
        compare([0.1], [0.1, 0.2])


def test_override_of_row_zero_is_the_defaults() -> None:
    space = cv.grid(100)
    assert override_of(0, space) is None
    assert override_of(1, space) == space[0]
    assert isinstance(override_of(len(space), space), FusionOverride)

"""The query-time tricks' formulas on small hand-computed examples (``retrieve.feedback``)."""

from __future__ import annotations

import numpy as np
import pytest

from retrieve.feedback import FeedbackDoc, neighbour_boost, rm3_query, rocchio
from retrieve.fusion import FusedHit


def test_rm3_by_hand() -> None:
    # P(t|R): doc a (score 3, share 3/4) = [x, x, y, z]; doc b (score 1, share 1/4) = [y, w].
    # x: 3/4 * 2/4 = 0.375; y: 3/4 * 1/4 + 1/4 * 1/2 = 0.3125; z: 0.1875; w: 0.125.
    fb = [FeedbackDoc(["x", "x", "y", "z"], 3.0), FeedbackDoc(["y", "w"], 1.0)]
    got = rm3_query(["q", "x"], fb, fb_terms=2, original_weight=0.6)
    mass = 0.375 + 0.3125  # the two kept terms, renormalised
    assert got == pytest.approx(
        {"q": 0.6 * 0.5, "x": 0.6 * 0.5 + 0.4 * 0.375 / mass, "y": 0.4 * 0.3125 / mass}
    )
    assert sum(got.values()) == pytest.approx(1.0)


def test_rm3_without_feedback_is_the_query_model() -> None:
    assert rm3_query(["a", "a", "b"], [], fb_terms=10, original_weight=0.5) == pytest.approx(
        {"a": 2 / 3, "b": 1 / 3}
    )
    # Documents with no score or no terms carry no feedback.
    zero = [FeedbackDoc(["c"], 0.0), FeedbackDoc([], 2.0)]
    assert rm3_query(["a"], zero, fb_terms=10, original_weight=0.5) == {"a": 1.0}
    assert rm3_query(["a"], [FeedbackDoc(["c"], 1.0)], fb_terms=5, original_weight=1.0) == {
        "a": 1.0,
        "c": 0.0,
    }
    with pytest.raises(ValueError):
        rm3_query(["a"], [], fb_terms=5, original_weight=1.5)


def test_rocchio_by_hand() -> None:
    q = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    fb = [np.array([0.0, 1.0, 0.0]), np.array([0.0, 0.0, 1.0])]
    got = rocchio(q, fb, alpha=1.0, beta=0.5)
    raw = np.array([1.0, 0.25, 0.25])
    np.testing.assert_allclose(got, raw / np.linalg.norm(raw), rtol=1e-6)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(rocchio(q, [], alpha=1.0, beta=1.0), q)
    with pytest.raises(ValueError):
        rocchio(q, fb, alpha=-1.0, beta=0.5)


def test_neighbour_boost_by_hand() -> None:
    fused = [FusedHit(1, 0.5), FusedHit(2, 0.4), FusedHit(3, 0.35), FusedHit(4, 0.1)]
    # Rows 2, 3, 4 are chunks of document 7 at offsets 0, 100, 200; row 1 is alone.
    spans = {1: (9, 0), 2: (7, 0), 3: (7, 100), 4: (7, 200)}
    got = neighbour_boost(fused, spans, weight=0.5)
    scores = {h.chunk_id: h.score for h in got}
    assert scores == pytest.approx(
        {1: 0.5, 2: 0.4 + 0.5 * 0.35, 3: 0.35 + 0.5 * (0.4 + 0.1), 4: 0.1 + 0.5 * 0.35}
    )
    assert [h.chunk_id for h in got] == [3, 2, 1, 4]
    assert neighbour_boost(fused, spans, weight=0.0) == fused


def test_neighbour_boost_adds_no_chunk() -> None:
    fused = [FusedHit(5, 1.0)]
    # Row 6 (the same document's next chunk) is no candidate: it neither appears nor counts.
    got = neighbour_boost(fused, {5: (1, 0), 6: (1, 50)}, weight=1.0)
    assert [(h.chunk_id, h.score) for h in got] == [(5, 1.0)]

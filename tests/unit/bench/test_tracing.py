"""bench.tracing's summary of side-by-side rounds, and the retrieve trace its ``--encode`` mode encodes."""

from __future__ import annotations

import marshal
import math
import random

import pytest

from bench.tracing import _geometric_interval, retrieve_trace_rows


def test_the_geometric_mean_of_ratios_and_its_interval() -> None:
    mean, lo, hi = _geometric_interval([1.0, 1.21, 1.1])
    assert mean == pytest.approx(math.exp((math.log(1.21) + math.log(1.1)) / 3))
    assert 1.0 <= lo < mean < hi <= 1.21


def test_equal_rounds_give_a_point_interval() -> None:
    assert _geometric_interval([1.04] * 5) == pytest.approx((1.04, 1.04, 1.04))


def test_the_interval_is_the_same_for_the_same_seed() -> None:
    ratios = [0.93, 1.07, 1.02, 0.98, 1.11, 1.0]
    assert _geometric_interval(ratios) == _geometric_interval(ratios)
    assert _geometric_interval(ratios, seed=1) != _geometric_interval(ratios)


def test_the_encoded_retrieve_trace_is_one_tree_that_both_encodings_agree_on() -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource

    from core.span_export import _encode_rows, _span

    rows = [marshal.loads(marshal.dumps(row)) for row in retrieve_trace_rows(random.Random(1))]
    ids = {row[2] for row in rows}
    (root,) = [row for row in rows if row[5] is None]
    assert root[0] == "POST /v1/retrieve" and len({row[1] for row in rows}) == 1
    assert all(row[5][0] in ids for row in rows if row is not root)  # every parent is in the trace
    assert {f"retrieve.{s}" for s in ("acl_filter", "dense", "lexical", "fusion", "fetch", "packing")} <= {
        row[0] for row in rows
    }
    resource = Resource.create({"service.name": "ragline"})
    assert (
        _encode_rows(rows, resource)
        == encode_spans([_span(r, resource) for r in rows]).SerializePartialToString()
    )


def test_the_pooled_ratio_is_of_percentiles_over_all_rounds() -> None:
    from bench.tracing import _pooled_interval

    off = [[10.0] * 95 + [20.0] * 5, [10.0] * 100]
    on = [[11.0] * 95 + [22.0] * 5, [11.0] * 100]
    mean, lo, hi = _pooled_interval(off, on, 50)
    assert mean == pytest.approx(1.1) and lo == pytest.approx(1.1) and hi == pytest.approx(1.1)
    mean, lo, hi = _pooled_interval([[10.0] * 50, [30.0] * 50], [[10.0] * 50, [33.0] * 50], 95)
    assert mean == pytest.approx(1.1) and lo <= 1.0 + 1e-9 < 1.1 <= hi + 1e-9

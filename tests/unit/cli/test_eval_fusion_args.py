"""``ragline eval``'s fusion flags: strict values, and only the flags given override."""

from __future__ import annotations

import argparse

import pytest

from catalog.fusion import FusionOverride
from cli import evaluate


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    evaluate.register(parser.add_subparsers())
    return parser.parse_args(["eval", "--dataset", "d", *argv])


def test_flags_become_an_override_of_only_what_was_given() -> None:
    assert evaluate._fusion(_parse()) is None
    args = _parse("--fusion-method", "convex", "--dense-weight", "0.7", "--lexical-candidates", "120")
    assert evaluate._fusion(args) == FusionOverride(method="convex", dense_weight=0.7, lexical_candidates=120)


@pytest.mark.parametrize(
    "argv",
    [
        ("--fusion-method", "linear"),
        ("--rrf-k", "0"),
        ("--rrf-k", "1.5"),
        ("--dense-weight", "-1"),
        ("--dense-weight", "nan"),
        ("--lexical-weight", "inf"),
        ("--dense-candidates", "5000"),
    ],
)
def test_bad_values_are_usage_errors(argv: tuple[str, ...]) -> None:
    with pytest.raises(SystemExit) as exc:
        _parse(*argv)
    assert exc.value.code == 2

"""testkit.sizes: the suite's size unless ``RAGLINE_SOAK=1``, a suite size never above the
soak's, and every test module sized by it marked ``soak`` (what ``make soak`` selects)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit import sizes

TESTS = Path(__file__).resolve().parents[1]


def test_the_suite_size_unless_soaking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sizes.ENV, raising=False)
    assert not sizes.soak() and sizes.size(2, 5) == 2
    monkeypatch.setenv(sizes.ENV, "0")
    assert sizes.size(2, 5) == 2
    monkeypatch.setenv(sizes.ENV, "1")
    assert sizes.soak() and sizes.size(2, 5) == 5


@pytest.mark.parametrize(("suite", "soak"), [(0, 5), (6, 5), (-1, 1)])
def test_a_suite_size_above_the_soak_size_or_not_positive_is_refused(suite: int, soak: int) -> None:
    with pytest.raises(ValueError, match="suite size"):
        sizes.size(suite, soak)


def test_every_sized_module_is_marked_soak() -> None:
    sized = [p for p in TESTS.rglob("test_*.py") if "from testkit.sizes import" in p.read_text()]
    assert sized  # the check below is not vacuous
    unmarked = [str(p.relative_to(TESTS)) for p in sized if "pytest.mark.soak" not in p.read_text()]
    assert unmarked == []

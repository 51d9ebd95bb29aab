"""testkit.sizes: the suite's size unless ``RAGLINE_SOAK=1``, and a suite size never above the soak's."""

from __future__ import annotations

import pytest

from testkit import sizes


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

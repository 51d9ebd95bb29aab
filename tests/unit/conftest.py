"""The unit tier is hermetic: what a user exported (``RAGLINE_DATA_DIR`` for one of several
deployments, a ``RAGLINE_API_URL`` for the client) never reaches a unit test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from core.settings import get_settings
from testkit.sizes import ENV as SOAK_ENV

# The harness's own switches, not the product's: `make soak` sets RAGLINE_SOAK for every tier.
HARNESS_VARIABLES = frozenset({SOAK_ENV})
# What tests/conftest.py sets for every app built in the test process (no start-up heap freeze).
SUITE_SETTINGS = {"RAGLINE_API__FREEZE_HEAP": "false"}


@pytest.fixture(autouse=True)
def hermetic_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every ``RAGLINE_*`` variable out of the environment but the harness's, and no settings
    cached from before, so each unit test starts from the defaults (and sets what it tests)."""
    for name in [n for n in os.environ if n.startswith("RAGLINE_") and n not in HARNESS_VARIABLES]:
        monkeypatch.delenv(name)
    for name, value in SUITE_SETTINGS.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()

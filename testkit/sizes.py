"""Loop sizes for the suite and for the soak run (``make soak``: ``RAGLINE_SOAK=1``).

A test whose loop size is not itself the property (random queries compared with an oracle,
crash kills, fuzz examples) runs the smallest size that still asserts it in the suite and the
full size in the soak run; a test that asserts a size (a 2,000-page PDF, a bound on memory)
keeps it in both. The comment at each call says why the suite's size still checks the property.
"""

from __future__ import annotations

import os

ENV = "RAGLINE_SOAK"


def soak() -> bool:
    """Whether this is the soak run (``RAGLINE_SOAK=1``)."""
    return os.environ.get(ENV, "") == "1"


def size(suite: int, soak_size: int) -> int:
    """``soak_size`` in the soak run, else ``suite`` (which must be the smaller, and positive)."""
    if not 0 < suite <= soak_size:
        raise ValueError(f"suite size {suite} must be positive and at most the soak size {soak_size}")
    return soak_size if soak() else suite

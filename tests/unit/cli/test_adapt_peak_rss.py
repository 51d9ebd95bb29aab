"""``adapt.json``'s peak RSS is the command's own, not its parent's (Linux keeps ``ru_maxrss``
across ``exec``; the bench and operators' tools start ``ragline adapt`` from large processes)."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")


def test_a_child_started_by_a_large_process_reports_its_own_peak() -> None:
    ballast = bytearray(400 * 1024 * 1024)  # touched: every page resident in this process
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    parent_peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = subprocess.run(
        [sys.executable, "-c", "from services.adaptation import peak_rss_mib; print(peak_rss_mib())"],
        capture_output=True,
        text=True,
        check=True,
    )
    child_peak_mib = float(out.stdout.strip())
    del ballast
    assert 0 < child_peak_mib < parent_peak_mib - 300

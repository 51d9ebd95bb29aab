"""bench.cold's eviction really leaves the benchmark's files out of the page cache."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bench.cold import cached_bytes, evict_page_cache


@pytest.mark.skipif(shutil.which("fincore") is None, reason="needs fincore (util-linux)")
def test_evicted_files_leave_the_page_cache(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    for name in ("a.bin", "sub/b.bin"):
        (tmp_path / name).write_bytes(os.urandom(2 << 20))  # written: dirty, then cached
        (tmp_path / name).read_bytes()
    cached = cached_bytes([tmp_path])
    assert cached is not None and cached > 0
    assert evict_page_cache([tmp_path]) == 4 << 20
    assert cached_bytes([tmp_path]) == 0

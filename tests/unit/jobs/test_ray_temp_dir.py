"""Ray's temp dir: under the data dir where Ray's socket paths fit, else a short one in /tmp."""

from __future__ import annotations

from pathlib import Path

from jobs.ray_runtime import _RAY_SOCKET_SUFFIX, AF_UNIX_PATH_MAX, ray_temp_dir


def test_a_short_data_dir_keeps_ray_under_it() -> None:
    assert ray_temp_dir(Path("/srv/rl")) == Path("/srv/rl/ray")


def test_a_data_dir_whose_socket_paths_would_be_too_long_falls_back_to_tmp() -> None:
    # 48 characters: short enough for the old 60-character rule, too long for Ray's sockets
    # (an xdist worker's base temp folder was such a path).
    data_dir = Path("/tmp/pytest-of-root/pytest-52/popen-gw0/ray-data0")
    temp = ray_temp_dir(data_dir)
    assert temp.parent == Path("/tmp") and temp.name.startswith("ragline-ray-")
    assert ray_temp_dir(data_dir) == temp  # the same data dir, the same folder
    assert ray_temp_dir(data_dir / "other") != temp
    for folder in (temp, ray_temp_dir(Path("/srv/rl"))):
        assert len(str(folder) + _RAY_SOCKET_SUFFIX) <= AF_UNIX_PATH_MAX

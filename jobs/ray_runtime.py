"""Starting Ray once per process: local (2-core friendly) or a cluster at RAGLINE_RAY_ADDRESS."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path

from core.errors import ConfigError

log = logging.getLogger(__name__)
_lock = threading.Lock()


def ray_temp_dir(data_dir: Path) -> Path:
    # Ray puts Unix sockets under its temp dir; long paths break them, so fall back to /tmp.
    path = (data_dir / "ray").resolve()
    if len(str(path)) > 60:
        path = Path("/tmp") / ("ragline-ray-" + hashlib.sha256(str(path).encode()).hexdigest()[:10])
    return path


def ensure_ray(*, address: str | None, data_dir: Path, num_cpus: int | None = None) -> None:
    """``ray.init`` unless already connected. Local mode has no dashboard and no usage stats."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("the batch pipeline needs `pip install 'ray[data]'`") from exc
    with _lock:
        if ray.is_initialized():
            return
        if address:
            ray.init(address=address, log_to_driver=False)
            log.info("connected to Ray cluster at %s", address)
            return
        temp = ray_temp_dir(data_dir)
        temp.mkdir(parents=True, exist_ok=True)
        ray.init(
            num_cpus=num_cpus or os.cpu_count() or 1,
            include_dashboard=False,
            _temp_dir=str(temp),
            log_to_driver=False,
            configure_logging=False,
        )
        log.info("started local Ray (temp dir %s)", temp)

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

# Lines Ray prints on every successful job that report no problem of ours, dropped from the
# server's stderr by ``quiet_known_notices`` (an exact substring each, so nothing else goes):
HARMLESS_NOTICES = (
    # core_worker.cc, at ERROR, for every Ray Data actor-pool worker: Ray Data itself passes
    # its DataContext and transformer as object-store refs to MapWorker actors it creates with
    # max_restarts=-1, and holds those refs for the whole execution (ray-project/ray#57733).
    "has constructor arguments in the object store and max_restarts > 0",
)


class _DropMessage(logging.Filter):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


_TOKEN_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
_TOKEN_AUTH_ENABLED = "Token authentication is enabled for this Ray cluster"


def _drop_token_auth_notice() -> None:
    """Ray warns on every local start that it turned token auth on, its default and ours.
    Only that message goes: the warning that auth is *off* stays. (Setting RAY_AUTH_MODE
    ourselves would do it too, but Ray reads it into its config at import, and a late value
    leaves the driver without a token for its own GCS.)"""
    target = logging.getLogger(_TOKEN_AUTH_LOGGER)
    if not any(isinstance(f, _DropMessage) for f in target.filters):
        target.addFilter(_DropMessage(_TOKEN_AUTH_ENABLED))


def quiet_known_notices() -> bool:
    """Filter ``HARMLESS_NOTICES`` out of this process's stderr (``core.stderr_filter``);
    for long-running commands (``ragline serve``/``run``), not for library use."""
    from core.stderr_filter import filter_stderr

    return filter_stderr(HARMLESS_NOTICES)


# Ray puts Unix sockets at <temp>/session_<date>_<time>_<usec>_<pid>/sockets/plasma_store, and
# a socket's path may not exceed 107 bytes (AF_UNIX).
AF_UNIX_PATH_MAX = 107
_RAY_SOCKET_SUFFIX = "/session_2026-12-07_06-44-01_607885_4194304/sockets/plasma_store"


def ray_temp_dir(data_dir: Path) -> Path:
    """Ray's temp dir under the data dir, or a short one in /tmp (named by the data dir's hash)
    where the data dir's path would make Ray's socket paths too long."""
    path = (data_dir / "ray").resolve()
    if len(str(path)) + len(_RAY_SOCKET_SUFFIX) > AF_UNIX_PATH_MAX:
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
        _drop_token_auth_notice()
        ray.init(
            num_cpus=num_cpus or os.cpu_count() or 1,
            include_dashboard=False,
            _temp_dir=str(temp),
            log_to_driver=False,
            configure_logging=False,
        )
        log.info("started local Ray (temp dir %s)", temp)

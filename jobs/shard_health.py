"""Which shard servers the fan-out sends queries to: a server whose call failed is out until a
readiness probe says its replacement has loaded the version the fan-out serves.

Why restartable actors and not Ray Serve. The fan-out must reach exactly one server per shard
group (server i holds shards i, i+N, ...): Serve routes a call to any replica of a deployment,
so each group would be a deployment of one replica, behind Serve's controller and its handle
router (another process and queue on every query, against the fan-out's 2 ms budget), to get
what a plain actor already has. An actor started with ``max_restarts=-1`` is recreated by Ray's
GCS when its worker process dies (kill -9, OOM, node loss), running ``__init__`` again with the
same ``ShardServerConfig``; that config names the alias, not a version, so the replacement
loads the version the alias points to now (also after swaps since the first start), with a
catalog view built at the current position, so a document deleted before the crash stays
masked. ``max_task_retries=0``: a query in flight when the server died fails (and degrades its
answer) rather than being replayed on the replacement past the answer's deadline.

What a restart leaves to the caller is knowing when the replacement is ready: calls sent while
it restarts wait in Ray until its ``__init__`` (the shard load) ends, which would cost every
answer the fan-out timeout. So a failed server is marked down and skipped at once (named in
``degraded`` with its shards); one ``ready()`` call per down server stays pending, is checked
without waiting on each query, and readmits the server once it answers with the version the
fan-out serves. ``ray.kill`` (``close``) never restarts: such a server stays down.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from core.errors import UnavailableError

log = logging.getLogger(__name__)

# How often a down server's failed probe is sent again (a pending probe is only looked at).
PROBE_INTERVAL_S = 0.25


class Ready(Protocol):
    """What a readiness probe answers (``jobs.shard_servers.Holding``)."""

    @property
    def version_id(self) -> str: ...

    @property
    def shards(self) -> tuple[int, ...]: ...


class ShardServersNotReadyError(UnavailableError):
    """A swap found a shard server that has not loaded the new version in the time allowed."""


@dataclass(slots=True)
class _Outage:
    reason: str
    since: float  # monotonic
    probe: Any  # the pending ready() ObjectRef, None until the next probe is due
    next_probe: float


class ServerHealth:
    """The up/down state of each shard server, shared by the API threads that fan out."""

    def __init__(self, servers: Sequence[Any], *, clock: Callable[[], float] = time.monotonic) -> None:
        self.servers = list(servers)
        self.clock = clock
        self.shards: dict[int, tuple[int, ...]] = {}  # each server's shards, as last reported
        self.recoveries: list[float] = []  # seconds each outage lasted, for logs and benches
        self._down: dict[int, _Outage] = {}
        self._lock = threading.Lock()

    def mark_down(self, i: int, reason: str) -> None:
        """Stop sending queries to server ``i`` until a probe readmits it."""
        with self._lock:
            if i in self._down:
                return
            now = self.clock()
            self._down[i] = _Outage(reason, now, None, now)
        log.warning("shard server %d (shards %s) is down: %s", i, self._shard_list(i), reason)

    def note(self, i: int, ready: Ready) -> None:
        self.shards[i] = tuple(ready.shards)

    def up(self, version: str | None) -> list[int]:
        """The servers to query now: looks at each down server's probe without waiting,
        readmitting one whose replacement serves ``version`` (any version when None)."""
        with self._lock:
            for i in list(self._down):
                self._probe(i, self._down[i], version)
            return [i for i in range(len(self.servers)) if i not in self._down]

    def missing(self) -> list[dict[str, str]]:
        """A ``degraded`` entry per down server, naming the shards its answer lacks."""
        with self._lock:
            down = sorted(self._down.items())
        now = self.clock()
        return [
            {
                "stage": "shards",
                "reason": f"server{i} (shards {self._shard_list(i)}) unavailable for"
                f" {now - o.since:.1f}s: {o.reason}",
            }
            for i, o in down
        ]

    def _probe(self, i: int, outage: _Outage, version: str | None) -> None:
        import ray

        now = self.clock()
        if outage.probe is None:
            if now < outage.next_probe:
                return
            outage.probe = self.servers[i].ready.remote()
        ready, _ = ray.wait([outage.probe], timeout=0)
        if not ready:
            return  # still restarting (or loading): the call waits in Ray for __init__ to end
        try:
            got: Ready = ray.get(outage.probe, timeout=0)
        except Exception:  # dead for good, or not restarted yet: probe again later
            outage.probe, outage.next_probe = None, now + PROBE_INTERVAL_S
            return
        self.note(i, got)
        if version is not None and got.version_id != version:
            outage.reason = f"loaded version {got.version_id}, the fan-out serves {version}"
            outage.probe, outage.next_probe = None, now + PROBE_INTERVAL_S
            return
        del self._down[i]
        self.recoveries.append(now - outage.since)
        log.warning(
            "shard server %d (shards %s) is back on version %s after %.1fs",
            i,
            self._shard_list(i),
            got.version_id,
            now - outage.since,
        )

    def _shard_list(self, i: int) -> str:
        shards = self.shards.get(i)
        return ", ".join(map(str, shards)) if shards else "unknown"

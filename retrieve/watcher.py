"""The index watcher: loads the aliased index version and keeps a serving node current.

It owns the ``ServingState``'s lifecycle apart from the request path: the initial load,
a thread that catches the catalog view up (woken by NOTIFY, polling as the fallback) and
follows the alias to new versions, and the catch-up a request asks for when the catalog
has moved past the view.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import psycopg
from psycopg_pool import ConnectionPool

from catalog import changes as changes_repo
from retrieve.serving import ServingState, alias_target

log = logging.getLogger(__name__)

# How often the LISTEN wait looks at ``close()``: psycopg's wait cannot be woken from another
# thread, so one wait of ``poll_seconds`` (2 s by default) held every shutdown for that long.
STOP_CHECK_S = 0.1


class IndexWatcher:
    """Loads the version ``alias`` points to, then follows the alias and the catalog.

    ``pool`` holds the catch-up and swap transactions. A version that cannot be loaded
    never stops the node: the old one (or, at start, the delta alone) keeps serving and
    ``last_swap_error`` says why. ``before_swap`` (the shard fan-out's wait for its servers
    to hold the version) runs before each swap; what it raises refuses the swap likewise.
    """

    def __init__(
        self,
        pool: ConnectionPool,
        state: ServingState,
        *,
        alias: str,
        poll_seconds: float,
        before_swap: Callable[[str], None] | None = None,
    ) -> None:
        self.pool = pool
        self.before_swap = before_swap
        self.state = state
        self.alias = alias
        self.poll_seconds = poll_seconds
        self.last_swap_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, *, watch: bool = True) -> None:
        """Load the aliased version; with ``watch``, follow changes in a daemon thread."""
        with self.pool.connection() as conn:
            target = alias_target(conn, self.alias)
            try:
                self.state.load(conn, target[1] if target else None)
            except Exception as exc:  # a bad version must not stop the node: serve the delta
                self.last_swap_error = f"{type(exc).__name__}: {exc}"
                log.error("cannot load index version %s: %s", target, exc)
                self.state.load(conn, None)
        if watch:
            self._thread = threading.Thread(target=self._watch, name="index-watcher", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)

    def readiness(self) -> str:
        return "ok" if self.state.loaded else "loading"

    def catch_up_to(self, position: int) -> None:
        """Apply the catalog changes up to at least ``position`` if the view is behind it."""
        if position > self.state.view.position:
            with self.pool.connection() as conn:
                self.state.catch_up(conn)

    def check_alias(self, conn: psycopg.Connection) -> str | None:
        """Switch to the alias's version if it moved; returns the new version id."""
        target = alias_target(conn, self.alias)
        if target is None or target[0] == self.state.current.version_id:
            return None
        try:
            self.last_swap_error = None
            if self.before_swap is not None:
                conn.commit()  # no transaction stays open while it waits
                self.before_swap(target[0])
            return self.state.swap_to(conn, target[1])
        except Exception as exc:  # refused: the old version keeps serving
            self.last_swap_error = f"{target[0]}: {type(exc).__name__}: {exc}"
            log.error("refused index version %s: %s", target[0], exc)
            return None

    def _watch(self) -> None:
        """Catch up and follow the alias: woken by NOTIFY, polling as the fallback."""
        listener: psycopg.Connection | None = None
        while not self._stop.is_set():
            try:
                if listener is None:
                    info = self.pool.conninfo
                    listener = psycopg.connect(info if isinstance(info, str) else info(), autocommit=True)
                    changes_repo.listen(listener)
                self._await_notify(listener)
                if self._stop.is_set():
                    break
            except Exception:  # no notifications: fall back to polling
                if listener is not None:
                    listener.close()
                listener = None
                if self._stop.wait(self.poll_seconds):
                    break
            try:
                with self.pool.connection() as conn:
                    self.state.catch_up(conn)
                    self.check_alias(conn)
            except Exception:  # keep serving on the current snapshot; retry next tick
                log.exception("index watcher tick failed")
        if listener is not None:
            listener.close()

    def _await_notify(self, listener: psycopg.Connection) -> None:
        """Until a NOTIFY arrives, ``poll_seconds`` pass or ``close()`` is called."""
        deadline = time.monotonic() + self.poll_seconds
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            woken = False
            for _ in listener.notifies(timeout=min(left, STOP_CHECK_S), stop_after=1):
                woken = True
            if woken:
                return

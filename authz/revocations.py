"""Following key revocations: every API process drops a revoked key from its cache.

The process that acknowledges a revocation drops the key itself before it answers
(``KeyAuthenticator.forget``); the others learn it from the NOTIFY the revocation sends at
commit (``catalog.principals.KEYS_CHANNEL``), which reaches a listening process within
milliseconds. While no notification can arrive (the listener's connection is down), the
cache's TTL (<= 1 s) still bounds a revoked key's life, and the cache is emptied on every
(re)connection, since revocations in between were not heard.
"""

from __future__ import annotations

import logging
import threading

import psycopg

from authz.principals import KeyAuthenticator
from catalog import principals as repo

log = logging.getLogger(__name__)

# How often the wait looks at ``close()``: psycopg's wait cannot be woken from another thread.
STOP_CHECK_S = 0.1
# Reconnection back-off; the cache's TTL bounds a missed revocation meanwhile.
RETRY_S = 1.0
CONNECT_TIMEOUT_S = 5
APPLICATION_NAME = "ragline-key-revocations"  # how pg_stat_activity shows the listener


class RevocationListener:
    """A daemon thread LISTENing for revoked keys, forgetting each in ``auth``."""

    def __init__(self, conninfo: str, auth: KeyAuthenticator) -> None:
        self._conninfo = conninfo
        self._auth = auth
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="key-revocations", daemon=True)
        self._conn: psycopg.Connection | None = None

    def start(self) -> None:
        """Listen now (the app is ready only once it hears revocations), then follow them."""
        self._connect()
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    @property
    def listening(self) -> bool:
        return self._conn is not None and not self._conn.closed

    def _connect(self) -> None:
        try:
            conn = psycopg.connect(
                self._conninfo,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_S,
                application_name=APPLICATION_NAME,
            )
            repo.listen_revocations(conn)
        except psycopg.Error as exc:
            log.warning("cannot listen for key revocations, retrying (the cache TTL bounds them): %s", exc)
            return
        self._conn = conn
        # Listening from here on; a revocation before this point was not heard.
        self._auth.forget_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._conn is None:
                if self._stop.wait(RETRY_S):
                    break
                self._connect()
                continue
            try:
                for notify in self._conn.notifies(timeout=STOP_CHECK_S):
                    self._auth.forget(notify.payload)
                    if self._stop.is_set():
                        break
            except Exception:  # a dropped connection: reconnect (the TTL bounds the gap)
                log.warning("lost the key revocation listener; reconnecting", exc_info=True)
                self._conn.close()
                self._conn = None
        if self._conn is not None:
            self._conn.close()

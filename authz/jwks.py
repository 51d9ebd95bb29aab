"""Identity providers' published keys, fetched off the request path.

A token names its issuer before anything about it is verified, so whatever a request does
for an issuer's keys, an unsigned token can make it do. Requests therefore only read the
cache. Fetches run on a small executor (one worker per issuer, so a slow provider delays no
other's), single-flight per issuer, at least ``min_refresh_s`` apart (failed ones included):
a background refresh every ``cache_s``, and a refetch when a token names an unknown ``kid``
(a rotation). Only the request that started that refetch waits for it, at most ``wait_s``;
a request arriving while a fetch is pending is refused at once. A burst of forged tokens
naming a slow provider thus costs one fetch per interval and holds no worker thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import Any

import httpx

from core.errors import AuthenticationError, UnavailableError

log = logging.getLogger(__name__)

# The key types each algorithm family verifies with; an ``oct`` (shared secret) key never
# verifies anything, so a public JWKS cannot be turned into an HMAC secret.
KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}
_MAX_JWKS_BYTES = 1 << 20
_TICK_S = 1.0


class Jwks:
    """One issuer's keys: read by requests, fetched on ``executor``."""

    def __init__(
        self,
        url: str,
        executor: ThreadPoolExecutor,
        *,
        timeout_s: float,
        cache_s: float,
        min_refresh_s: float,
        wait_s: float,
    ) -> None:
        self._url = url
        self._executor = executor
        self._timeout_s = timeout_s
        self._cache_s = cache_s
        self._min_refresh_s = min_refresh_s
        self._wait_s = wait_s
        self._keys: dict[str | None, dict[str, Any]] = {}
        self._fetched_at: float | None = None
        self._tried_at: float | None = None
        self._pending: Future[None] | None = None
        self._lock = threading.Lock()  # held for bookkeeping only, never across a fetch
        self.fetches = 0  # fetches started (tests and metrics read it)

    def key(self, kid: str | None) -> dict[str, Any]:
        """The published key ``kid`` names.

        Raises:
            AuthenticationError: the issuer does not publish that key.
            UnavailableError: no keys yet, or a fetch for this issuer is pending.
        """
        with self._lock:
            found = self._cached(kid)
            if found is not None:
                return found
            started = self._start_fetch() if self._may_fetch() else None
        if started is not None:
            wait_for([started], timeout=self._wait_s)
        with self._lock:
            found = self._cached(kid)
            if found is not None:
                return found
            if not self._keys:
                raise UnavailableError("the identity provider's keys are unavailable")
        raise AuthenticationError("token signed with a key its issuer does not publish")

    def _cached(self, kid: str | None) -> dict[str, Any] | None:
        """The cached key ``kid`` names, None if absent; refused while a fetch is pending (the
        caller holds the lock)."""
        found = self._find(kid)
        if found is None and self._pending is not None:
            raise UnavailableError("the identity provider's keys are being fetched; retry shortly")
        return found

    def refresh_if_stale(self) -> None:
        """Start a background fetch if the keys are older than ``cache_s`` (or absent)."""
        with self._lock:
            now = time.monotonic()
            stale = self._fetched_at is None or now - self._fetched_at >= self._cache_s
            if stale and self._pending is None and self._may_fetch():
                self._start_fetch()

    def settle(self, timeout_s: float) -> None:
        """Wait at most ``timeout_s`` for a pending fetch (start-up: keys before the first request)."""
        with self._lock:
            pending = self._pending
        if pending is not None:
            wait_for([pending], timeout=max(0.0, timeout_s))

    def _find(self, kid: str | None) -> dict[str, Any] | None:
        found = self._keys.get(kid)
        if found is None and kid is None and len(self._keys) == 1:
            found = next(iter(self._keys.values()))
        return found

    def _may_fetch(self) -> bool:
        return self._tried_at is None or time.monotonic() - self._tried_at >= self._min_refresh_s

    def _start_fetch(self) -> Future[None] | None:
        """Under the lock: submit one fetch (None once the executor is shut down)."""
        self._tried_at = time.monotonic()
        try:
            self._pending = self._executor.submit(self._refresh)
        except RuntimeError:
            return None
        self.fetches += 1
        return self._pending

    def _refresh(self) -> None:
        try:
            keys = fetch_jwks(self._url, timeout_s=self._timeout_s)
        except (httpx.HTTPError, ValueError) as exc:
            # Cached keys stay in use; with none, requests are answered 503.
            log.warning("JWKS fetch from %s failed: %s", self._url, exc)
            keys = None
        with self._lock:
            if keys is not None:
                self._keys, self._fetched_at = keys, time.monotonic()
            self._pending = None


def fetch_jwks(url: str, *, timeout_s: float) -> dict[str | None, dict[str, Any]]:
    """The public keys of the JWKS at ``url`` by ``kid``, the whole fetch within ``timeout_s``
    (a provider that trickles bytes is cut off too)."""
    deadline = time.monotonic() + timeout_s
    with httpx.stream("GET", url, timeout=httpx.Timeout(timeout_s), follow_redirects=False) as response:
        response.raise_for_status()
        body = b""
        for part in response.iter_bytes():
            body += part
            if len(body) > _MAX_JWKS_BYTES:
                raise ValueError("JWKS document too large")
            if time.monotonic() > deadline:
                raise ValueError("JWKS fetch exceeded its timeout")
    data = httpx.Response(200, content=body).json()
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise ValueError("not a JWKS document")
    public = set(KEY_TYPES.values())
    keys = {k.get("kid"): k for k in data["keys"] if isinstance(k, dict) and k.get("kty") in public}
    if not keys:
        raise ValueError("JWKS has no usable public key")
    return keys


class JwksRefresher:
    """Keeps every issuer's keys fresh in the background: a first fetch at ``start()``, which
    waits for them at most ``settle_s`` in all (so a fast provider's keys are there for the
    first request and a slow one delays start-up by no more), then a check each second (each
    ``Jwks`` fetches only when stale and allowed)."""

    def __init__(self, sets: Sequence[Jwks], *, settle_s: float) -> None:
        self._sets = tuple(sets)
        self._settle_s = settle_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        for jwks in self._sets:
            jwks.refresh_if_stale()
        deadline = time.monotonic() + self._settle_s
        for jwks in self._sets:
            jwks.settle(deadline - time.monotonic())
        self._thread = threading.Thread(target=self._run, name="jwks-refresher", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(_TICK_S):
            for jwks in self._sets:
                jwks.refresh_if_stale()

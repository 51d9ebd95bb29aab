"""IndexWatcher without a database: a refused version keeps the old one and says why, and
closing it does not wait out the poll."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from core.errors import IndexIntegrityError
from retrieve import watcher as watcher_module
from retrieve.watcher import IndexWatcher

CONN = object()


class FakePool:
    @contextmanager
    def connection(self) -> Iterator[object]:
        yield CONN


class FakeState:
    """Records what the watcher asks of the serving state; ``bad`` paths fail to load."""

    def __init__(self, bad: set[str]) -> None:
        self.bad = bad
        self.version_id: str | None = None
        self.view = SimpleNamespace(position=5)
        self.catch_ups = 0

    @property
    def loaded(self) -> bool:
        return self.version_id is not None

    @property
    def current(self) -> SimpleNamespace:
        return SimpleNamespace(version_id=self.version_id)

    def load(self, conn: object, path: Path | None) -> None:
        if path is not None and path.name in self.bad:
            raise IndexIntegrityError(f"cannot load {path.name}")
        self.version_id = path.name if path else "delta-only"

    def swap_to(self, conn: object, path: Path) -> str:
        if path.name in self.bad:
            raise IndexIntegrityError(f"cannot load {path.name}")
        self.version_id = path.name
        return path.name

    def catch_up(self, conn: object) -> int:
        self.catch_ups += 1
        return 0


@pytest.fixture()
def alias(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    target = {"live": "v1"}

    def alias_target(conn: object, name: str) -> tuple[str, Path] | None:
        assert conn is CONN
        version = target.get(name)
        return (version, Path("/idx") / version) if version else None

    monkeypatch.setattr(watcher_module, "alias_target", alias_target)
    return target


def _watcher(state: FakeState) -> IndexWatcher:
    return IndexWatcher(FakePool(), state, alias="live", poll_seconds=60)  # type: ignore[arg-type]


def test_a_refused_version_keeps_the_old_one(alias: dict[str, str]) -> None:
    state = FakeState(bad={"v2"})
    watcher = _watcher(state)
    watcher.start(watch=False)
    assert (state.version_id, watcher.last_swap_error, watcher.readiness()) == ("v1", None, "ok")
    alias["live"] = "v2"
    assert watcher.check_alias(CONN) is None  # type: ignore[arg-type]
    assert state.version_id == "v1"
    assert watcher.last_swap_error == "v2: IndexIntegrityError: cannot load v2"
    alias["live"] = "v3"
    assert watcher.check_alias(CONN) == "v3"  # type: ignore[arg-type]
    assert (state.version_id, watcher.last_swap_error) == ("v3", None)
    assert watcher.check_alias(CONN) is None  # type: ignore[arg-type]  # unchanged alias: nothing to do


def test_a_bad_version_at_start_serves_the_delta(alias: dict[str, str]) -> None:
    state = FakeState(bad={"v1"})
    watcher = _watcher(state)
    assert watcher.readiness() == "loading"
    watcher.start(watch=False)
    assert state.version_id == "delta-only"
    assert watcher.last_swap_error == "IndexIntegrityError: cannot load v1"
    assert watcher.readiness() == "ok"


def test_catch_up_only_when_the_view_is_behind(alias: dict[str, str]) -> None:
    state = FakeState(bad=set())
    watcher = _watcher(state)
    watcher.catch_up_to(5)
    assert state.catch_ups == 0
    watcher.catch_up_to(6)
    assert state.catch_ups == 1


class SilentListener:
    """A LISTEN connection no NOTIFY ever reaches: each wait runs to its timeout."""

    def __init__(self) -> None:
        self.closed = False

    def notifies(self, *, timeout: float, stop_after: int) -> Iterator[object]:
        time.sleep(timeout)
        yield from ()

    def close(self) -> None:
        self.closed = True


def test_close_stops_the_watch_thread_long_before_the_poll(
    alias: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watcher polling every 60 s closes at once: a shutdown (each test's app teardown
    included) once waited out the whole LISTEN wait, 2 s at the default poll."""
    listener = SilentListener()
    monkeypatch.setattr(watcher_module.psycopg, "connect", lambda *a, **k: listener)
    monkeypatch.setattr(watcher_module.changes_repo, "listen", lambda conn: None)
    pool = FakePool()
    pool.conninfo = "postgresql://nowhere"  # type: ignore[attr-defined]
    watcher = IndexWatcher(pool, FakeState(bad=set()), alias="live", poll_seconds=60)  # type: ignore[arg-type]
    watcher.start()
    time.sleep(0.3)  # the thread is in its LISTEN wait
    started = time.monotonic()
    watcher.close()
    assert time.monotonic() - started < 1.0
    assert watcher._thread is not None and not watcher._thread.is_alive()
    assert listener.closed

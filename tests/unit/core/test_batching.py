"""The shared micro-batcher: batching limits, deadlines, errors and closing."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest

from core.batching import MicroBatcher, result_within
from core.errors import ConfigError, UnavailableError


class Recorder:
    """Doubles its inputs; records every batch; can block until released."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()

    def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        self.started.set()
        self.gate.wait(5)
        if -1 in items:
            raise RuntimeError("bad item")
        return [2 * i for i in items]


def _batcher(run: Recorder, **kwargs: object) -> MicroBatcher[int, int]:
    batcher: MicroBatcher[int, int] = MicroBatcher(run, max_items=4, **kwargs)  # type: ignore[arg-type]
    batcher.start()
    return batcher


def _blocked(run: Recorder, batcher: MicroBatcher[int, int]) -> Future[int]:
    """A first request holding the worker inside the batch function."""
    run.gate.clear()
    first = batcher.submit_one(100)
    assert run.started.wait(5)
    return first


def test_results_follow_items_and_requests() -> None:
    run = Recorder()
    batcher = _batcher(run)
    assert batcher.submit([1, 2, 3]).result(5) == [2, 4, 6]
    assert batcher.submit_one(7).result(5) == 14
    assert batcher.submit([]).result(0) == []
    batcher.close()


def test_requests_arriving_during_a_batch_share_the_next_one() -> None:
    run = Recorder()
    batcher = _batcher(run)
    first = _blocked(run, batcher)
    waiting = [batcher.submit_one(i) for i in range(6)]
    run.gate.set()
    assert first.result(5) == 200
    assert [f.result(5) for f in waiting] == [0, 2, 4, 6, 8, 10]
    assert run.batches[1:] == [[0, 1, 2, 3], [4, 5]]  # max_items caps each batch
    assert batcher.batches_run == 3
    batcher.close()


def test_padded_cost_cap() -> None:
    run = Recorder()
    batcher = _batcher(run, max_cost=10)
    first = _blocked(run, batcher)
    later = batcher.submit([1, 2, 3, 4], costs=[2, 2, 5, 20])
    run.gate.set()
    assert first.result(5) == 200 and later.result(5) == [2, 4, 6, 8]
    # 2 items * 5 tokens fit in 10; the 20-token item goes alone, over the cap.
    assert run.batches[1:] == [[1, 2], [3], [4]]
    batcher.close()


def test_max_wait_gathers_a_fuller_batch() -> None:
    run = Recorder()
    batcher = _batcher(run, max_wait_s=0.3)
    futures = [batcher.submit_one(i) for i in range(3)]
    assert [f.result(5) for f in futures] == [0, 2, 4]
    assert run.batches == [[0, 1, 2]]
    batcher.close()


def test_cancelled_and_expired_requests_are_dropped() -> None:
    run = Recorder()
    batcher = _batcher(run)
    first = _blocked(run, batcher)
    cancelled = batcher.submit([1, 2])
    expired = batcher.submit([3], deadline=time.monotonic() + 0.01)
    kept = batcher.submit_one(4)
    assert cancelled.cancel()
    time.sleep(0.05)
    run.gate.set()
    assert first.result(5) == 200 and kept.result(5) == 8
    assert run.batches[1:] == [[4]]
    with pytest.raises(TimeoutError):
        expired.result(5)
    batcher.close()


def test_result_within_cancels_on_timeout() -> None:
    run = Recorder()
    batcher = _batcher(run)
    _blocked(run, batcher)
    late = batcher.submit_one(5)
    with pytest.raises(TimeoutError):
        result_within(late, 0.02)
    assert late.cancelled()
    run.gate.set()
    batcher.close()
    assert [5] not in run.batches


def test_a_failing_batch_fails_its_requests_only() -> None:
    run = Recorder()
    batcher = _batcher(run)
    with pytest.raises(RuntimeError, match="bad item"):
        batcher.submit([1, -1]).result(5)
    assert batcher.submit_one(3).result(5) == 6
    batcher.close()


def test_close_fails_waiting_requests_or_drains_them() -> None:
    for drain in (False, True):
        run = Recorder()
        batcher = _batcher(run, drain_on_close=drain)
        first = _blocked(run, batcher)
        waiting = batcher.submit_one(1)
        closer = threading.Thread(target=batcher.close)
        closer.start()
        time.sleep(0.05)
        run.gate.set()
        closer.join(5)
        assert first.result(5) == 200
        if drain:
            assert waiting.result(5) == 2
        else:
            with pytest.raises(UnavailableError):
                waiting.result(5)
        with pytest.raises(UnavailableError, match="closed"):
            batcher.submit_one(2)


def test_limits_are_checked() -> None:
    with pytest.raises(ConfigError):
        MicroBatcher(Recorder(), max_items=0)
    with pytest.raises(ValueError):
        MicroBatcher(Recorder(), max_items=1, max_cost=4).submit([1, 2], costs=[1])

"""Shard fan-out: one shard runs in the caller, the rest on the pool; faults degrade the stage."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from core.records import Hit
from retrieve.hybrid import HybridSearcher, PlannerConfig, StageLog
from retrieve.serving import ServingState

Task = tuple[str, Callable[[], list[Hit]]]
# The fan-out never plans; any base parameters do.
PLANNER = PlannerConfig(ef_search=128, nprobe=16)


@pytest.fixture()
def searcher() -> Iterator[HybridSearcher]:
    pool = ThreadPoolExecutor(max_workers=4)
    state = ServingState(model_name="m", dim=4, tokenizer=None)  # type: ignore[arg-type]
    yield HybridSearcher(state, planner=PLANNER, pool=pool, stage_timeout_s=0.3)
    pool.shutdown(wait=True)


def _hits(row: int) -> Callable[[], list[Hit]]:
    return lambda: [Hit(row, 1.0, "dense")]


def test_first_shard_runs_in_the_calling_thread(searcher: HybridSearcher) -> None:
    ran_in: dict[str, str] = {}

    def shard(name: str) -> Callable[[], list[Hit]]:
        def run() -> list[Hit]:
            ran_in[name] = threading.current_thread().name
            return [Hit(len(ran_in), 1.0, "dense")]

        return run

    log = StageLog()
    parts = searcher._fan_out("dense", [("shard0", shard("a")), ("shard1", shard("b"))], log)
    assert ran_in["a"] == threading.current_thread().name
    assert ran_in["b"] != threading.current_thread().name
    assert sorted(len(p) for p in parts) == [1, 1]
    assert log.degraded == []


def test_failures_and_timeouts_degrade_without_failing(searcher: HybridSearcher) -> None:
    def broken() -> list[Hit]:
        raise RuntimeError("disk gone")

    def slow() -> list[Hit]:
        time.sleep(1.0)
        return [Hit(9, 1.0, "dense")]

    log = StageLog()
    tasks: list[Task] = [("shard0", broken), ("shard1", slow), ("shard2", _hits(3))]
    parts = searcher._fan_out("lexical", tasks, log)
    assert [h.chunk_id for part in parts for h in part] == [3]
    reasons = {d["reason"] for d in log.degraded}
    assert reasons == {"shard0 failed: RuntimeError", "shard1 timed out after 0.3s"}
    assert all(d["stage"] == "lexical" for d in log.degraded)


def test_slow_inline_shard_is_dropped_after_the_timeout(searcher: HybridSearcher) -> None:
    def slow() -> list[Hit]:
        time.sleep(0.5)
        return [Hit(1, 1.0, "dense")]

    log = StageLog()
    parts = searcher._fan_out("dense", [("shard0", slow), ("shard1", _hits(2))], log)
    assert [h.chunk_id for part in parts for h in part] == [2]
    assert log.degraded == [{"stage": "dense", "reason": "shard0 timed out after 0.3s"}]


def test_no_shards(searcher: HybridSearcher) -> None:
    assert searcher._fan_out("dense", [], StageLog()) == []

"""The start-up heap freeze: what is frozen escapes every collection until it is unfrozen,
so the server's long-lived objects are not rescanned, and an app that closes frees its
cycles again."""

from __future__ import annotations

import gc
import weakref

from core.heap import freeze_startup_heap, unfreeze_heap


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_frozen_objects_escape_collection_until_unfrozen() -> None:
    node = _Node()
    alive = weakref.ref(node)
    try:
        assert freeze_startup_heap() > 0
        del node
        gc.collect()
        assert alive() is not None, "a frozen cycle was scanned and freed"
    finally:
        unfreeze_heap()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert alive() is None, "an unfrozen dead cycle was not freed"


def test_garbage_present_at_the_freeze_is_collected_first() -> None:
    node = _Node()
    alive = weakref.ref(node)
    del node  # dead before the freeze: freed by its collection, not frozen for good
    try:
        freeze_startup_heap()
        assert alive() is None
    finally:
        unfreeze_heap()

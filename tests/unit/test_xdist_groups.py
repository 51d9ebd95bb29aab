"""testkit.xdist_groups: how make test splits the suite over two workers. A file is one unit,
a group's files are one unit, a SPLIT file's tests are units of their own, the heaviest units
are handed out first, and the configuration names only what exists."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace

import pytest

from testkit import xdist_groups

REPO = Path(__file__).resolve().parents[2]


def test_a_file_is_a_unit_and_a_group_keeps_its_files_together() -> None:
    unit = xdist_groups.unit_of
    assert unit("tests/unit/test_compose.py::test_expected_services") == "tests/unit/test_compose.py"
    assert unit("tests/e2e/test_server.py::test_a") == unit("tests/e2e/test_console.py::test_b") == "servers"
    assert unit("tests/integration/api/test_fair_admission.py::test_x") == "servers"
    assert unit("tests/integration/jobs/test_ray_cluster.py::test_y") == "ray"
    assert unit("tests/unit/rerank/test_training.py::test_z[torch]") == "rerank"
    eval_file = "tests/integration/evaluation/test_eval_reference.py"
    assert unit(f"{eval_file}::test_reference_scores[cisi]") != unit(
        f"{eval_file}::test_reference_scores[nfcorpus]"
    )


def test_the_configuration_names_only_what_exists() -> None:
    for prefixes in xdist_groups.GROUPS.values():
        for prefix in prefixes:
            assert (REPO / prefix).exists(), prefix
    for path in xdist_groups.SPLIT:
        assert (REPO / path).is_file(), path
    for first in xdist_groups.FIRST:
        assert first in xdist_groups.GROUPS or (REPO / first).is_file(), first
    assert set(xdist_groups.GROUP_FIXTURES.values()) <= set(xdist_groups.GROUPS)


def _item(nodeid: str, fixtures: tuple[str, ...]) -> pytest.Item:
    return SimpleNamespace(nodeid=nodeid, fixturenames=fixtures)  # type: ignore[return-value]


def test_a_test_outside_the_group_its_fixture_needs_is_named() -> None:
    inside = _item("tests/integration/jobs/test_ingest_jobs.py::test_a", ("ray_local", "db_url"))
    outside = _item("tests/integration/api/test_new.py::test_b", ("db_url", "ray_local"))
    assert xdist_groups.misplaced([inside]) == []
    assert xdist_groups.misplaced([inside, outside]) == [
        "tests/integration/api/test_new.py::test_b (uses ray_local, belongs in group 'ray')"
    ]


class _Node:
    """A worker as the scheduler sees it: it records what it was sent (fault-free stand-in for
    xdist's WorkerController, which needs a live process)."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def test_the_heaviest_units_go_out_first() -> None:
    pytest.importorskip("xdist")
    collection = [
        "tests/unit/test_compose.py::test_a",
        "tests/unit/test_compose.py::test_b",
        "tests/integration/jobs/test_ray_cluster.py::test_c",
        "tests/e2e/test_server.py::test_d",
        "tests/unit/test_env_example.py::test_e",
        "tests/e2e/test_console.py::test_f",
    ]
    from xdist.remote import Producer

    config = SimpleNamespace(getvalue={"tx": ["2*popen"]}.get, option=SimpleNamespace(loadscopereorder=False))
    sched = xdist_groups.make_scheduler(config, Producer("test", enabled=False))  # type: ignore[arg-type]
    nodes = [_Node("gw0"), _Node("gw1")]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, collection)
    sched.schedule()
    first, second = ([collection[i] for i in node.sent] for node in nodes)
    # The group first, whole, on one worker; Ray's group first on the other; then the files.
    assert first[:2] == ["tests/e2e/test_server.py::test_d", "tests/e2e/test_console.py::test_f"]
    assert second[:1] == ["tests/integration/jobs/test_ray_cluster.py::test_c"]
    assert isinstance(sched.workqueue, OrderedDict)
    handed_out = first + second + [nodeid for unit in sched.workqueue.values() for nodeid in unit]
    assert sorted(handed_out) == sorted(collection)  # each test once

"""How ``make test`` splits the suite over two pytest-xdist workers (``-n 2 --dist loadfile``).

Registered by ``tests/conftest.py``. Each test file is one unit of work, so a file's
module-scoped fixtures (a shared app, a live server) start on one worker only; the files
named in ``GROUPS`` are kept together as one unit, run one after another on one worker:

- ``servers``: the end-to-end tests (``ragline serve`` subprocesses, the browser, nginx,
  Dovecot, kill -9) and the in-process tests whose property is behaviour under load. No two of
  them fight each other for the 2 cores.
- ``ray``: the tests that start Ray (the session's ``ray_local``, a two-node cluster) or build
  the test model variants: one Ray, and one set of variants, on the machine at a time.
- ``rerank``: the tests of the trained cross-encoder, which the session trains once.

The heaviest units start first (``FIRST``), so no long unit is left to run alone at the end.

pytest-xdist's own ``xdist_group`` mark cannot do this here: it renames each test's node id,
which pytest 9.2 no longer lets a plugin do, so the marks are silently ignored (tests of one
group spread over both workers). This plugin uses xdist's documented scheduler hook
(``pytest_xdist_make_scheduler``) and reads only node ids, which the controller has.
"""

from __future__ import annotations

from typing import Any

import pytest

GROUPS: dict[str, tuple[str, ...]] = {
    "servers": (
        "tests/e2e/",
        "tests/integration/api/test_swap_under_load.py",
        "tests/integration/api/test_limits_under_load.py",
        "tests/integration/api/test_fair_admission.py",
        "tests/integration/api/test_backpressure.py",
        "tests/integration/api/test_database_faults.py",
        "tests/integration/catalog/test_deadline_pool.py",
    ),
    "ray": ("tests/integration/jobs/",),
    "rerank": ("tests/unit/rerank/",),
}
# Files whose tests are units of their own: each is minutes of independent work (the reference
# scores of one collection each), so the two can run at once.
SPLIT = ("tests/integration/evaluation/test_eval_reference.py",)
# Units handed out first, heaviest first (their time in docs/benchmarks.md, "The test suite's
# own time"): a group's name, or a file whose tests (SPLIT) come first. The rest follow in
# collection order, so the last units are the many short unit-test files.
FIRST = ("servers", "ray", "tests/integration/evaluation/test_eval_reference.py", "rerank")
# A test that uses one of these fixtures must be in the named group (checked at collection).
GROUP_FIXTURES = {"ray_local": "ray", "model_variants_dir": "ray", "trained": "rerank"}


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its group's name, the test (in a SPLIT file), or else
    its file."""
    path = nodeid.split("::", 1)[0]
    if path in SPLIT:
        return nodeid
    for name, prefixes in GROUPS.items():
        if path.startswith(prefixes):
            return name
    return path


def misplaced(items: list[pytest.Item]) -> list[str]:
    """Tests that use a fixture of ``GROUP_FIXTURES`` from outside its group."""
    return [
        f"{item.nodeid} (uses {fixture}, belongs in group {group!r})"
        for item in items
        for fixture, group in GROUP_FIXTURES.items()
        if fixture in getattr(item, "fixturenames", ()) and unit_of(item.nodeid) != group
    ]


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadFileScheduling

    class GroupedFileScheduling(LoadFileScheduling):
        """``--dist loadfile`` with ``GROUPS`` kept together and ``FIRST`` handed out first."""

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            for first in reversed(FIRST):
                for unit in [u for u in self.workqueue if u == first or u.startswith(first + "::")]:
                    self.workqueue.move_to_end(unit, last=False)
            super()._assign_work_unit(node)

    return GroupedFileScheduling(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist", None) != "loadfile":
        return None
    return make_scheduler(config, log)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wrong = misplaced(items)
    if wrong:
        raise pytest.UsageError(
            "tests outside the xdist group their fixtures need (testkit/xdist_groups.py): " + "; ".join(wrong)
        )

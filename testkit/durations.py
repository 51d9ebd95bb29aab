"""The suite's own time report: every test's duration (setup, call and teardown together), by
bucket, written to a file and summed up at the end of the run.

Registered by ``tests/conftest.py``. At the end of a run it writes every test that took at
least ``MIN_SECONDS`` to ``--durations-file`` (default ``test-durations.tsv`` in the rootdir,
git-ignored) as ``seconds<TAB>bucket<TAB>node id``, slowest first, and prints the total, the
time of each bucket and the 30 slowest tests, so a CI log shows where the minutes went. Under
pytest-xdist the bucket travels with each report (``user_properties``), so the controller
sums what the workers measured.

The buckets answer "what kind of cost is this" (issue 42's table): end-to-end subprocess
tests, Ray and shard servers, models and training, generated suites (fuzzing, randomized
permission checks, property tests), API tests that start an app per test, API tests that
share an app, and the rest.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest

MIN_SECONDS = 1.0
SLOWEST = 30
BUCKETS = (
    "e2e",
    "ray/shard servers",
    "models/training",
    "generated suites",
    "API, app per test",
    "API, shared app",
    "the rest",
)
_BUCKET_KEY = "duration_bucket"

# Fixtures that say what a test pays for (the first matching bucket wins, in BUCKETS' order).
_RAY_FIXTURES = frozenset({"ray_local"})  # shard-server and Ray-cluster tests: by file name
_MODEL_FIXTURES = frozenset(
    {"trained", "model_dir", "reranker", "onnx_reranker", "any_reranker", "model_variants_dir"}
)
_SHARED_APP_FIXTURES = frozenset({"foundation_client_shared", "full_client_shared", "live_server_module"})
_APP_FIXTURES = frozenset({"foundation_client", "full_client", "live_server", "client"})
_GENERATED_FILES = ("fuzz", "no_leak", "permission_attacks")
_MODEL_FILES = ("onnx", "embedder", "model_variants", "reranker", "train")


def bucket_of(nodeid: str, fixtures: set[str] | frozenset[str], *, hypothesis: bool = False) -> str:
    """The bucket of a test, from its node id and the fixtures it uses."""
    path = nodeid.split("::", 1)[0]
    name = path.rsplit("/", 1)[-1]
    if path.startswith("tests/e2e/"):
        return "e2e"
    if fixtures & _RAY_FIXTURES or "shard" in name or "ray" in name:
        return "ray/shard servers"
    if (
        fixtures & _MODEL_FIXTURES
        or path.startswith("tests/unit/rerank/")
        or any(word in name for word in _MODEL_FILES)
    ):
        return "models/training"
    if hypothesis or any(word in name for word in _GENERATED_FILES):
        return "generated suites"
    if fixtures & _SHARED_APP_FIXTURES:
        return "API, shared app"
    if fixtures & _APP_FIXTURES:
        return "API, app per test"
    return "the rest"


def _item_bucket(item: pytest.Item) -> str:
    fixtures = set(getattr(item, "fixturenames", ()))
    function = getattr(item, "function", None)
    hypothesis = bool(getattr(function, "is_hypothesis_test", False))
    return bucket_of(item.nodeid, fixtures, hypothesis=hypothesis)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--durations-file",
        default="test-durations.tsv",
        help="where the suite's time report is written, relative to the rootdir (every test"
        f" of at least {MIN_SECONDS:g} s); empty to write none",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.user_properties.append((_BUCKET_KEY, _item_bucket(item)))


class DurationReport:
    """Sums each test's phases as their reports arrive, and reports at the end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.seconds: dict[str, float] = defaultdict(float)
        self.buckets: dict[str, str] = {}
        self.started = time.monotonic()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        for key, value in report.user_properties:
            if key == _BUCKET_KEY:
                self.buckets[report.nodeid] = str(value)

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.seconds:
            return
        wall = time.monotonic() - self.started
        ranked = sorted(self.seconds.items(), key=lambda kv: kv[1], reverse=True)
        per_bucket: dict[str, list[float]] = defaultdict(list)
        for nodeid, seconds in ranked:
            per_bucket[self.buckets.get(nodeid, "the rest")].append(seconds)
        total = sum(self.seconds.values())
        write = terminalreporter.write_line
        terminalreporter.section("test durations (setup + call + teardown)")
        write(f"total {total:.0f} s over {len(ranked)} tests; wall {wall:.0f} s")
        for bucket in BUCKETS:
            times = per_bucket.get(bucket, [])
            write(f"  {bucket:<20} {sum(times):8.0f} s  {len(times):5d} tests")
        write(f"the {SLOWEST} slowest:")
        for nodeid, seconds in ranked[:SLOWEST]:
            write(f"  {seconds:7.1f} s  {self.buckets.get(nodeid, 'the rest'):<18}  {nodeid}")
        target = self.config.getoption("durations_file")
        if target:
            path = Path(self.config.rootpath, target)
            rows = [
                f"{seconds:.2f}\t{self.buckets.get(nodeid, 'the rest')}\t{nodeid}"
                for nodeid, seconds in ranked
                if seconds >= MIN_SECONDS
            ]
            path.write_text("seconds\tbucket\ttest\n" + "".join(f"{row}\n" for row in rows))
            write(f"every test of {MIN_SECONDS:g} s or more: {path}")


def pytest_configure(config: pytest.Config) -> None:
    # Only where results arrive: the controller under xdist, the one process otherwise.
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(DurationReport(config), "ragline-durations")

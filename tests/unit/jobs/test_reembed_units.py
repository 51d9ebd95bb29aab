"""Pure parts of model migrations: the stored parsed text, gate metrics, arguments."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from catalog.reembed import ParentSection
from core.errors import InvalidInputError
from core.records import ParsedDocument, Section, SectionKind
from core.settings import Settings
from ingest.parsed_store import decode_parsed, encode_parsed
from jobs.rechunk import from_parents
from jobs.reembed_gate import GATE_READER, ndcg_at_10, read_query_file
from jobs.reembed_job import ReembedArgs
from wiring.reembed import parse_chunking


def test_parsed_text_round_trips_compressed() -> None:
    text = "Intro\n\nBody text " * 50
    doc = ParsedDocument(
        text,
        (
            Section("Intro", SectionKind.HEADING, ("Intro",), 0, 5, 1, 1),
            Section(text[7:], SectionKind.PARAGRAPH, ("Intro",), 7, len(text), 1, 2),
        ),
        title="T",
        page_count=2,
        warnings=("w",),
    )
    blob = encode_parsed(doc)
    assert len(blob) < len(text) / 4  # compressed
    assert decode_parsed(blob) == doc


def test_ndcg_at_10_matches_the_definition() -> None:
    assert ndcg_at_10(["a", "b"], {"a": 1}) == 1.0
    assert ndcg_at_10(["b", "a"], {"a": 1}) == pytest.approx(1 / 1.5849625, rel=1e-6)
    assert ndcg_at_10(["x"], {"a": 1}) == 0.0
    assert ndcg_at_10([], {}) == 0.0


def test_query_file_lines(tmp_path: Path) -> None:
    f = tmp_path / "q.tsv"
    f.write_text("# comment\nacme\tglacier valleys\nacme\tuser:a,group:g\tbudget 2026\n\nbad line\n")
    rows = read_query_file(f, 10)
    assert rows == [
        ("acme", frozenset({GATE_READER}), "glacier valleys"),
        ("acme", frozenset({"user:a", "group:g"}), "budget 2026"),
    ]
    assert len(read_query_file(f, 1)) == 1


def test_args_round_trip_through_job_params() -> None:
    args = ReembedArgs(model="/m", chunking="128/16", shards=3, force=True)
    assert ReembedArgs.from_params({**args.to_params(), "report": {"x": 1}}) == args


def test_chunking_argument() -> None:
    config = parse_chunking("128/16", Settings())
    assert config is not None and config.label == "128/16"
    assert parse_chunking(None, Settings()) is None
    for bad in ("8/0", "128/128", "x/1"):
        with pytest.raises(InvalidInputError):
            parse_chunking(bad, Settings())


def test_parent_sections_rebuild_a_document_at_their_offsets() -> None:
    doc = from_parents(
        [
            ParentSection("alpha beta", ["H"], "paragraph", 0, 10, None, None),
            ParentSection("gamma", ["H", "S"], "list", 12, 17, 2, 2),
        ]
    )
    assert doc is not None and doc.text == "alpha beta\n\ngamma"
    assert [s.heading_path for s in doc.sections] == [("H",), ("H", "S")]
    assert doc.sections[1].kind is SectionKind.LIST
    assert from_parents([]) is None


def test_another_model_gets_its_own_onnx_export_folder(tmp_path: Path) -> None:
    from core.settings import Settings
    from wiring import embedding_spec

    spec = embedding_spec(Settings(data_dir=tmp_path))
    other = spec.for_model("/models/minilm-cls")
    assert other.model_name == "/models/minilm-cls" and other.threads == spec.threads
    assert spec.onnx_dir is not None and other.onnx_dir == spec.onnx_dir.parent / "minilm-cls-onnx"


LINUX_SCHED = pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux-only")

_WHOLE_PROCESS = """
import os, sys, threading
from jobs.reembed_backfill import Demoter, Isolation
stop = threading.Event()
threading.Thread(target=stop.wait, daemon=True).start()  # a thread older than the demotion
demoter = Demoter(Isolation(priority=sys.argv[1], nice=7, threads=1, cpus=(0,)), whole_process=True)
threading.Thread(target=stop.wait, daemon=True).start()  # started after: inherits it
demoter.again()
tids = [int(t) for t in os.listdir("/proc/self/task")]
assert all(os.sched_getaffinity(t) == {0} for t in tids)  # reembed.cpus pins every thread
print(len(tids), *sorted({(os.sched_getscheduler(t), os.getpriority(os.PRIO_PROCESS, t)) for t in tids}))
"""


@LINUX_SCHED
@pytest.mark.parametrize("priority", ["idle", "nice"])
def test_an_actor_process_demotes_every_thread(priority: str) -> None:
    repo = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        [sys.executable, "-c", _WHOLE_PROCESS, priority],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split()
    assert int(out[0]) >= 3  # main and both threads (torch may add its own)
    policies = out[1:]
    expected = f"({os.SCHED_IDLE}," if priority == "idle" else f"({os.SCHED_OTHER},"
    assert policies and all(p.startswith(expected) for p in policies[::2]), out
    if priority == "nice":
        assert policies == [f"({os.SCHED_OTHER},", "7)"]


@LINUX_SCHED
def test_the_inline_lane_demotes_its_own_thread_not_the_callers() -> None:
    from jobs.reembed_backfill import Isolation, _Lane

    before = os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)
    lane = _Lane(Isolation(priority="idle", nice=10, threads=1))
    try:
        assert lane.call(os.sched_getscheduler, 0) == os.SCHED_IDLE
    finally:
        lane.close()
    assert (os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)) == before

"""Progress writes plain lines (never a carriage return) when its stream is not a terminal."""

from __future__ import annotations

import io

from core.progress import Progress


def test_plain_lines_in_a_pipe() -> None:
    stream = io.StringIO()
    progress = Progress(3, stream=stream, line_seconds=0.0)
    progress(1, 10)
    progress(2, 5)
    progress.close()
    text = stream.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert lines[0].startswith("1/3 docs  10 chunks") and "ETA" in lines[0]
    assert lines[-1].startswith("3/3 docs  15 chunks") and "ETA" not in lines[-1]


def test_lines_are_rate_limited_but_the_last_one_is_written() -> None:
    stream = io.StringIO()
    progress = Progress(100, stream=stream, line_seconds=3600.0)
    for _ in range(100):
        progress(1, 1)
    lines = stream.getvalue().splitlines()
    assert lines == [lines[-1]] and lines[-1].startswith("100/100 docs")


def test_unknown_total_has_no_eta() -> None:
    progress = Progress(0, stream=io.StringIO(), line_seconds=0.0)
    progress(4, 8)
    assert "ETA" not in progress.line() and progress.line().startswith("4 docs  8 chunks")


def test_a_resumed_job_counts_from_where_it_stopped_with_a_sensible_eta() -> None:
    # Issue 17: `jobs resume` printed "8/0 docs ... ETA -33s" (no total, ETA from earlier runs).
    stream = io.StringIO()
    progress = Progress(10, done=8, stream=stream, line_seconds=0.0)
    assert progress.line().startswith("8/10 docs  0 chunks") and "ETA" not in progress.line()
    progress(1, 4)
    line = stream.getvalue().splitlines()[-1]
    assert line.startswith("9/10 docs  4 chunks")
    eta = float(line.rsplit("ETA ", 1)[1].rstrip("s"))
    assert eta >= 0
    progress(1, 4)
    assert stream.getvalue().splitlines()[-1].startswith("10/10 docs  8 chunks")
    assert "ETA" not in stream.getvalue().splitlines()[-1]
    progress(1, 0)  # more than the total (a racing worker finished one too): never a negative ETA
    assert "ETA" not in progress.line() and "-" not in progress.line()

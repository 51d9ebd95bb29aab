"""``ragline connect``'s report: the job's warnings per document in text and JSON, capped
with a count of the rest; items still failing from earlier runs said in one line with the
date they first failed, not as failures."""

from __future__ import annotations

import json

import pytest

from cli.connect_report import SHOWN, render
from ragline_client import SyncReport
from ragline_client.failures import Remembered


def _report() -> SyncReport:
    report = SyncReport(pushed=SHOWN + 2)
    for i in range(SHOWN + 2):
        report.warn(f"doc{i:02}.txt", ["decoded_as: cp1252"])
    report.warn("doc00.txt", ["no_readers: nobody can read it", "decoded_as: cp1252"])
    report.still_failing = {
        "book.xlsx": Remembered("sha256:ab|acl:1", "encrypted_document", "2026-01-05T09:12:03Z"),
        "old.pdf": Remembered("sha256:cd|acl:1", "corrupt_pdf", "2026-01-04T08:00:00Z"),
    }
    return report


def test_json_summary_holds_warnings_capped_and_the_still_failing_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    render(_report(), {"skipped": {"hidden": 1}}, as_json=True)
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert (summary["pushed"], summary["failed"], summary["still_failing"]) == (SHOWN + 2, 0, 2)
    assert summary["skipped"] == {"hidden": 1}
    assert summary["warnings"]["documents"] == SHOWN + 2
    shown = summary["warnings"]["shown"]
    assert list(shown) == [f"doc{i:02}.txt" for i in range(SHOWN)]
    assert shown["doc00.txt"] == "decoded_as: cp1252; no_readers: nobody can read it"  # each once
    assert "  warning doc09.txt: decoded_as: cp1252" in err and "doc10.txt" not in err
    assert "... and 2 more documents with warnings" in err


def test_text_summary_says_still_failing_once_with_the_first_date(capsys: pytest.CaptureFixture[str]) -> None:
    render(_report(), {}, as_json=False)
    out, err = capsys.readouterr()
    assert "still_failing 2" in out and f"warnings {SHOWN + 2}" in out and "failed 0" in out
    assert "2 items still failing since 2026-01-04T08:00:00Z, unchanged; not retried" in err
    assert "book.xlsx: encrypted_document" in err and "old.pdf: corrupt_pdf" in err
    assert "failed book.xlsx" not in err

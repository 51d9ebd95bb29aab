"""``ragline tune`` exits 2 with one line, and changes nothing, when it has nothing to tune on."""

from __future__ import annotations

import psycopg
import pytest

from catalog.audit import entries
from cli.main import main
from cli.tune import format_report
from evaluation.tuning import FoldReport, TuneReport

pytestmark = pytest.mark.integration


def test_tune_without_judged_queries_is_a_usage_error(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tune", "--tenant", "acme"]) == 2
    assert "--dataset DIR and/or --from-feedback" in capsys.readouterr().err
    assert main(["tune", "--tenant", "acme", "--from-feedback"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ragline: error:") and "0 judged queries" in err and "Traceback" not in err
    with psycopg.connect(cli_env) as conn:
        assert entries(conn, action="fusion.tune") == []  # nothing ran, nothing audited
    with pytest.raises(SystemExit):
        main(["tune", "--tenant", "acme", "--from-feedback", "--folds", "1"])


def test_report_table_names_each_fold_and_the_decision() -> None:
    fold = FoldReport(0, 5, {"method": "rrf", "rrf_k": 10}, 0.61, 0.52, 0.8, 0.75)
    report = TuneReport(
        "acme", ["feedback"], 5, 149, 100, [fold], {"method": "rrf"}, {"method": "rrf", "rrf_k": 10}, {},
        1, 0.61, 0.52, 0.09, (0.02, 0.15), 0.8, 0.75, 0.05, (0.0, 0.1), reason="because",
    )  # fmt: skip
    text = format_report(report)
    assert "| 0 | 5 | 0.6100 | 0.5200 | 0.8000 | 0.7500 |" in text
    assert "+0.0900, 95% +0.0200..+0.1500" in text and text.endswith("because")

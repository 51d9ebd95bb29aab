"""``ragline reranker gate`` refuses what it cannot measure (exit 2, nothing stored);
``ragline reranker off`` and what ``ragline status`` shows of each tenant's reranker."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from catalog import rerankers as rerankers_repo
from catalog.audit import entries
from catalog.principals import ensure_tenant
from cli.main import main
from cli.reranker import format_gate
from evaluation.reranker_gate import GateReport
from tests.integration.cli.test_read_commands import _run

pytestmark = pytest.mark.integration


def test_gate_without_enough_judged_queries_is_a_usage_error(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = str(tmp_path)
    rc, _, err = _run(capsys, "reranker", "gate", "--tenant", "acme", "--model", model)
    assert rc == 2 and "--dataset DIR and/or --from-feedback" in err
    rc, _, err = _run(
        capsys, "reranker", "gate", "--tenant", "acme", "--model", str(tmp_path / "no"), "--from-feedback"
    )
    assert rc == 2 and "no reranker model folder" in err
    rc, _, err = _run(capsys, "reranker", "gate", "--tenant", "acme", "--model", model, "--from-feedback")
    assert rc == 2 and "0 judged queries, fewer than 5" in err and "Traceback" not in err
    with psycopg.connect(cli_env) as conn:
        assert entries(conn, action="reranker.gate") == []
        assert rerankers_repo.all_tenant_rerankers(conn) == []
    with pytest.raises(SystemExit):  # nDCG@10 needs ten results
        main(["reranker", "gate", "--tenant", "acme", "--model", model, "--from-feedback", "--top-k", "5"])


def test_off_stores_the_tenants_reranker_off_and_status_shows_it(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = _run(capsys, "reranker", "off", "--tenant", "nobody")
    assert rc == 2 and "no tenant 'nobody'" in err
    gate = {
        "passed": True, "forced_off": False, "ndcg_without": 0.5, "ndcg_with": 0.56, "ndcg_difference": 0.06,
        "interval": [0.01, 0.11], "queries": 40, "sources": ["feedback"], "rule": "r",
    }  # fmt: skip
    with psycopg.connect(cli_env) as conn:
        ensure_tenant(conn, tenant_id="acme")
        ensure_tenant(conn, tenant_id="beta")
        rerankers_repo.set_tenant_reranker(
            conn, tenant_id="beta", model="/models/beta-rr", enabled=True, gate=gate, actor="test"
        )
    rc, out, _ = _run(capsys, "reranker", "off", "--tenant", "acme")
    assert rc == 0 and "acme: reranker off" in out
    rc, out, _ = _run(capsys, "status", "--json")
    rows = {r["tenant_id"]: r for r in json.loads(out)["rerankers"]}
    assert rc == 0 and rows["acme"]["enabled"] is False and rows["acme"]["gate"] is None
    assert rows["beta"]["enabled"] is True and rows["beta"]["gate"]["ndcg_with"] == 0.56
    rc, out, _ = _run(capsys, "status")
    assert rc == 0 and "turned off, no gate" in out
    assert "passed: nDCG@10 0.5000 -> 0.5600 (+0.0600, 95% +0.0100..+0.1100), 40 queries" in out
    with psycopg.connect(cli_env) as conn:
        (audit,) = entries(conn, action="reranker.off")
    assert audit.tenant_id == "acme" and audit.details == {"model": None, "had_row": False, "via": "cli"}


def test_gate_report_names_the_numbers_the_rule_and_the_decision() -> None:
    report = GateReport(
        "acme", "/models/rr", ["feedback"], 12, 10, 50, "rrf", 0.61, 0.58, -0.03, (-0.07, 0.01),
        passed=False, enabled=False, forced_off=False,
    )  # fmt: skip
    text = format_gate(report)
    assert "nDCG@10 without 0.6100, with 0.5800 (-0.0300, 95% -0.0700..+0.0100)" in text
    assert "rule: mean nDCG@10 difference >= 0" in text and text.endswith("the tenant's reranker is off")

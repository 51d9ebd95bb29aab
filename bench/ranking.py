"""Issue 22's whole table: today's defaults, tuned fusion, an adapted embedder and an adapted
reranker, each on queries that tuning and training never saw.

Per BEIR collection, in fresh data directories under ``--work`` (each with its own embedded
PostgreSQL, started as ``ragline tune`` starts it and stopped afterwards):

1. ``defaults``: the collection ingested in-process into a tenant with the base model
   (``evaluation.tuning.judged_set``, ``ragline tune``'s own ingestion), each judged query's two
   candidate legs gathered once through the real ``SearchService`` (``evaluation.tuning.gather``)
   and scored with the server's default fusion (RRF k=60, equal weights; ``tuning.score``:
   nDCG@10 and recall@100 of a top-100 request).
2. ``tuned fusion``: ``evaluation.cv.cross_validate`` over ``ragline tune``'s grid (5 folds,
   seed 0): each query scored by the setting chosen on the other four folds.
3. ``ragline adapt`` on that tenant (the CLI as a subprocess, as an operator runs it), bounded
   by ``--adapt-seconds`` and ``--max-pairs``: label-free pairs mined from the tenant's own
   text; the judgements are never read.
4. ``tuned + adapted embedder``: a second data directory whose embedding model is the adapted
   ``DIR/embedder``, the collection ingested (re-embedded) again, gathered, and tuned fusion
   scored held out the same way (the same folds: they depend only on the query ids and seed).
5. ``+ adapted reranker``: on that service, each query searched as a top-``[rerank]
   candidates`` request (50 by default) with the fusion its fold chose in step 4 and the
   adapted reranker (``RerankChoice``, as ``ragline reranker gate`` measures: the server's
   blend over the first stage's ranks). Its recall@100 is not measured (a 50-result request);
   its nDCG@10 without the reranker, from the same request, isolates the reranker's part.
   Optionally (``--base-rerank``) the same reranker on the base embedder with default fusion,
   what ``ragline reranker gate`` would measure. ``--reuse-adapted`` takes the models an
   earlier run left in ``--work`` (its ``adapt.json``) instead of training again, and
   ``--no-adapted-index`` stops after the base embedder's rows (with ``--base-rerank``: the
   gate's row alone, at the cost of one re-ingest skipped by content hash).

Every difference is paired per query against ``defaults`` with a 95% percentile bootstrap
interval (``evaluation.cv.bootstrap_interval``, 2,000 resamples, seed 0). The rerank budget is
raised to ``--rerank-budget-ms`` (default 600 s) so that a slow CPU measures the model, not
the timeout; answers the reranker still did not order are counted.

    OPENBLAS_NUM_THREADS=1 HF_HUB_OFFLINE=1 nice -n 19 python -m bench.ranking \\
        ../shared/data/cranfield ../shared/data/cisi --adapt-seconds 600 --json ranking.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from psycopg_pool import ConnectionPool

from authz.acl import AclFilter
from catalog import embedded
from catalog.connect import local_cluster
from catalog.fusion import FusionOverride
from core.ir_metrics import doc_scores_from_chunks, ndcg_at_k
from core.settings import Settings
from evaluation import cv
from evaluation.tuning import JudgedQuery, JudgedSet, QueryCandidates, gather, judged_set, score
from retrieve.service import FusionConfig, RerankChoice, RetrieveRequest, SearchService
from services.adaptation import REPORT, AdaptReport
from wiring import build_search_service
from wiring.search import load_batching_reranker

TOP_K = 100  # results per scored request, as ``ragline tune`` scores
FOLDS = 5
SEED = 0
SAMPLES = 2000


# --- pure parts -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeldOut:
    """Per query (in ``query_ids`` order): the row its fold chose on the other folds and that
    row's scores on it."""

    query_ids: list[str]
    rows: list[int]
    ndcg: list[float]
    recall: list[float]
    fold_rows: list[int]  # each fold's chosen row


def held_out(
    ndcg: Sequence[Sequence[float]],
    recall: Sequence[Sequence[float]],
    query_ids: Sequence[str],
    *,
    folds: int = FOLDS,
    seed: int = SEED,
) -> HeldOut:
    """``evaluation.cv.cross_validate`` (row 0 current, every row a choice) read back per
    query: the fold of each query from ``cv.kfold`` (the same folds cross_validate deals), the
    row that fold chose, and its scores; checked against cross_validate's paired differences."""
    result = cv.cross_validate(ndcg, recall, 0, query_ids, k=folds, seed=seed, samples=1)
    fold_of = {q: i for i, ids in enumerate(cv.kfold(query_ids, folds, seed)) for q in ids}
    rows = [result.folds[fold_of[q]].chosen for q in query_ids]
    out_n = [ndcg[r][c] for c, r in enumerate(rows)]
    out_r = [recall[r][c] for c, r in enumerate(rows)]
    for c, diff in enumerate(result.ndcg_differences):
        if abs(out_n[c] - ndcg[0][c] - diff) > 1e-9:
            raise RuntimeError(f"held-out row of query {query_ids[c]} disagrees with cross_validate")
    return HeldOut(list(query_ids), rows, out_n, out_r, [f.chosen for f in result.folds])


@dataclass(frozen=True, slots=True)
class Comparison:
    mean: float
    difference: float  # mean paired difference against the baseline
    interval: tuple[float, float]  # its 95% bootstrap interval


def compare(values: Sequence[float], baseline: Sequence[float], *, seed: int = SEED) -> Comparison:
    """The mean of ``values`` and its paired difference from ``baseline`` (same queries, same
    order) with the 95% percentile bootstrap interval.

    Raises:
        ValueError: the two lists differ in length or are empty.
    """
    if len(values) != len(baseline):
        raise ValueError(f"{len(values)} values paired with {len(baseline)} baseline values")
    diffs = [v - b for v, b in zip(values, baseline, strict=True)]
    low, high = cv.bootstrap_interval(diffs, samples=SAMPLES, seed=seed)
    return Comparison(cv.mean(values), cv.mean(diffs), (low, high))


def override_of(row: int, space: Sequence[FusionOverride]) -> FusionOverride | None:
    """The request override that scores as grid row ``row`` (row 0, the defaults: none)."""
    return None if row == 0 else space[row - 1]


# --- measurement ------------------------------------------------------------------------


@dataclass(slots=True)
class Row:
    name: str
    ndcg: list[float]
    recall: list[float] | None  # None: not measured by this row's requests
    note: str = ""
    chosen: list[dict[str, Any]] = field(default_factory=list)  # each fold's fusion


@dataclass(slots=True)
class Collection:
    name: str
    query_ids: list[str]
    rows: list[Row]
    seconds: dict[str, float]
    adapt: dict[str, Any]
    unreranked: dict[str, int]
    fusion_default: dict[str, Any]


@dataclass(slots=True)
class Stage:
    """One data directory's measured state: the judged set, its service and the fusion table."""

    settings: Settings
    judged: JudgedSet
    gathered: list[QueryCandidates]
    configs: list[FusionConfig]
    space: list[FusionOverride]
    ndcg: list[list[float]]
    recall: list[list[float]]


def _settings(base: Settings, data_dir: Path, model: str | None, budget_ms: int) -> Settings:
    update: dict[str, Any] = {
        "data_dir": data_dir,
        "rerank": base.rerank.model_copy(update={"budget_ms": budget_ms}),
    }
    if model is not None:
        update["embedding_model"] = model
    return base.model_copy(update=update)


def _open(
    stage_settings: Settings, judged: JudgedSet
) -> tuple[SearchService, ConnectionPool, Callable[[], None]]:
    pool = ConnectionPool(judged.url, min_size=1, max_size=4, open=True)
    service, close = build_search_service(
        stage_settings, pool, judged.embedder, alias=judged.alias, watch=False
    )
    return service, pool, close


def measure_fusion(settings: Settings, dataset: Path, tenant: str) -> Stage:
    """Ingest ``dataset`` into ``tenant`` and score every judged query under every fusion setting
    ``ragline tune`` tries (row 0: the tenant's current setting, the server's defaults)."""
    judged = judged_set(
        settings, tenant, command="bench.ranking", dataset=dataset, from_feedback=False, split="test",
        use_ray=False, embedder=None, minimum=FOLDS, fewer=f"{FOLDS} folds",
    )  # fmt: skip
    service, pool, close = _open(settings, judged)
    try:
        current = service.fusion_for(tenant)
        space = cv.grid(TOP_K)
        configs = [current, *(service.fusion.merged(o) for o in space)]
        depth = max(c.depth(leg, TOP_K) for c in configs for leg in ("dense", "lexical"))
        gathered = gather(service, judged.queries, tenant=tenant, top_k=TOP_K, depth=depth)
    finally:
        close()
        pool.close()
    ndcg, recall = [], []
    for config in configs:
        scored = [score(c, config, TOP_K) for c in gathered]
        ndcg.append([n for n, _ in scored])
        recall.append([r for _, r in scored])
    return Stage(settings, judged, gathered, configs, space, ndcg, recall)


def _ndcg10(
    service: SearchService, q: JudgedQuery, req: RetrieveRequest, acl: AclFilter, choice: RerankChoice | None
) -> tuple[float, str | None]:
    """nDCG@10 of the answer and the reranker that ordered it (None: none did)."""
    result = service.retrieve(req, acl, rerank_with=choice)
    docs = doc_scores_from_chunks([(r.detail.external_id, r.score) for r in result.results])
    return ndcg_at_k(docs, q.qrels, 10), result.reranker


def rerank_scores(
    stage: Stage, model: Path, tenant: str, overrides: Sequence[FusionOverride | None]
) -> tuple[list[float], list[float], int]:
    """Per query: nDCG@10 of a top-``[rerank] candidates`` request with its override, without and
    with the reranker at ``model``; and how many answers the reranker did not order."""
    service, pool, close = _open(stage.settings, stage.judged)
    scorer = load_batching_reranker(stage.settings, str(model.resolve()))
    choice = RerankChoice(scorer, model.name)
    size = service.rerank_config.candidates
    without, with_, unreranked = [], [], 0
    try:
        for q, override in zip(stage.judged.queries, overrides, strict=True):
            acl = AclFilter(tenant_id=tenant, readers=q.readers)
            req = RetrieveRequest(
                query=q.text, top_k=size, mode="hybrid", rerank=False, max_context_tokens=0, fusion=override
            )
            n0, _ = _ndcg10(service, q, req, acl, None)
            req = RetrieveRequest(
                query=q.text, top_k=size, mode="hybrid", rerank=True, max_context_tokens=0, fusion=override
            )
            n1, by = _ndcg10(service, q, req, acl, choice)
            without.append(n0)
            with_.append(n1)
            unreranked += by is None
    finally:
        scorer.close()
        close()
        pool.close()
    return without, with_, unreranked


def _adapt(stage: Stage, tenant: str, out: Path, args: argparse.Namespace) -> AdaptReport:
    """``ragline adapt`` on the tenant, as an operator runs it: a subprocess with the machine's
    own torch threads (in this process the ingest's embedder has set torch to
    ``embedding_threads``, 1 by default) and its own peak RSS; its ``adapt.json`` read back."""
    if not (args.reuse_adapted and (out / REPORT).is_file()):  # else an earlier run's models
        command = [
            sys.executable, "-m", "cli.main", "adapt", "--tenant", tenant, "--out", str(out),
            "--max-pairs", str(args.max_pairs), "--max-seconds", str(args.adapt_seconds), "--seed", str(SEED),
        ]  # fmt: skip
        env = {**os.environ, "RAGLINE_DATABASE_URL": stage.judged.url, "HF_HUB_OFFLINE": "1"}
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"ragline adapt failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return AdaptReport(**json.loads((out / REPORT).read_text(encoding="utf-8")))


def _stop(settings: Settings) -> None:
    embedded.down(local_cluster(settings))


def _held_row(name: str, stage: Stage, note: str = "") -> tuple[Row, HeldOut]:
    ids = [c.query.query_id for c in stage.gathered]
    h = held_out(stage.ndcg, stage.recall, ids)
    chosen = [stage.configs[r].describe() for r in h.fold_rows]
    return Row(name, h.ndcg, h.recall, note, chosen), h


def _adapted_rows(
    dataset: Path,
    base: Settings,
    work: Path,
    args: argparse.Namespace,
    report: AdaptReport,
    ids: list[str],
    secs: dict[str, float],
    unreranked: dict[str, int],
) -> list[Row]:
    """Steps 4 and 5: the collection re-embedded by the adapted embedder in its own data
    directory, tuned fusion held out, then the adapted reranker over each fold's fusion."""
    name, tenant, model_dir = (
        dataset.resolve().name,
        f"ranking-{dataset.resolve().name}",
        Path(report.out_dir),
    )
    if report.embedder is None:
        raise RuntimeError(f"{name}: adapt trained no embedder")
    second = _settings(
        base, work / name / "adapted-index", str(model_dir / "embedder"), args.rerank_budget_ms
    )
    rows = []
    t = time.monotonic()
    try:
        adapted = measure_fusion(second, dataset, tenant)
        secs["ingest_gather_adapted"] = round(time.monotonic() - t, 1)
        if [c.query.query_id for c in adapted.gathered] != ids:
            raise RuntimeError(f"{name}: the adapted run judged other queries")
        rows.append(Row("defaults + adapted embedder", adapted.ndcg[0], adapted.recall[0]))
        row, h = _held_row("tuned fusion + adapted embedder (held out)", adapted)
        rows.append(row)
        if report.reranker is not None:
            t = time.monotonic()
            overrides = [override_of(r, adapted.space) for r in h.rows]
            w0, w, unreranked["adapted"] = rerank_scores(adapted, model_dir / "reranker", tenant, overrides)
            rows.append(
                Row("tuned + adapted embedder, top-50 request, no rerank", w0, None, "top-50 request")
            )
            rows.append(Row("tuned + adapted embedder + adapted reranker", w, None, "top-50 request"))
            secs["rerank_adapted"] = round(time.monotonic() - t, 1)
    finally:
        _stop(second)
    return rows


def run(dataset: Path, base: Settings, work: Path, args: argparse.Namespace) -> Collection:
    """The whole table for one collection (see the module docstring)."""
    name = dataset.resolve().name
    tenant = f"ranking-{name}"
    secs: dict[str, float] = {}
    t = time.monotonic()
    first = _settings(base, work / name / "base", None, args.rerank_budget_ms)
    unreranked: dict[str, int] = {}
    try:
        stage = measure_fusion(first, dataset, tenant)
        secs["ingest_gather_base"] = round(time.monotonic() - t, 1)
        ids = [c.query.query_id for c in stage.gathered]
        rows = [Row("defaults (base embedder, RRF k=60)", stage.ndcg[0], stage.recall[0])]
        tuned, _ = _held_row("tuned fusion (held out)", stage)
        rows.append(tuned)
        print(f"[{name}] base measured in {secs['ingest_gather_base']} s", flush=True)
        t = time.monotonic()
        report = _adapt(stage, tenant, work / name / "adapted", args)
        secs["adapt"] = round(time.monotonic() - t, 1)
        print(f"[{name}] adapt: {report.seconds} s, examples {report.examples}", flush=True)
        model_dir = Path(report.out_dir)
        if args.base_rerank and report.reranker is not None:
            t = time.monotonic()
            _, w, unreranked["base"] = rerank_scores(stage, model_dir / "reranker", tenant, [None] * len(ids))
            rows.append(Row("defaults + adapted reranker (base embedder)", w, None, "top-50 request"))
            secs["rerank_base"] = round(time.monotonic() - t, 1)
    finally:
        _stop(first)
    if not args.no_adapted_index:
        rows += _adapted_rows(dataset, base, work, args, report, ids, secs, unreranked)
    adapt = {k: v for k, v in asdict(report).items() if k != "out_dir"}
    return Collection(name, ids, rows, secs, adapt, unreranked, stage.configs[0].describe())


# --- output -----------------------------------------------------------------------------


def table(c: Collection) -> list[str]:
    """Markdown rows: each row's means and its paired difference from ``defaults``."""
    base_n, base_r = c.rows[0].ndcg, c.rows[0].recall or []
    lines = [
        f"{c.name}: {len(c.query_ids)} judged queries",
        "| row | nDCG@10 | vs defaults [95%] | recall@100 | vs defaults [95%] |",
        "|---|---|---|---|---|",
    ]
    for r in c.rows:
        n = compare(r.ndcg, base_n)
        cells = [r.name, f"{n.mean:.4f}", _ci(n)]
        if r.recall is None:
            cells += ["—", "—"]
        else:
            rc = compare(r.recall, base_r)
            cells += [f"{rc.mean:.4f}", _ci(rc)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _ci(c: Comparison) -> str:
    return f"{c.difference:+.4f} [{c.interval[0]:+.4f}, {c.interval[1]:+.4f}]"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument(
        "--adapt-seconds", type=float, default=600.0, help="adapt's two training loops together"
    )
    parser.add_argument("--max-pairs", type=int, default=4000)
    parser.add_argument("--rerank-budget-ms", type=int, default=600_000)
    parser.add_argument("--base-rerank", action="store_true", help="also the reranker on the base embedder")
    parser.add_argument(
        "--reuse-adapted",
        action="store_true",
        help="take the models of an earlier run in --work (its adapt.json)",
    )
    parser.add_argument("--no-adapted-index", action="store_true", help="stop after the base embedder's rows")
    parser.add_argument("--work", type=Path, help="data directories go here (default: a new temp dir)")
    parser.add_argument("--json", type=Path, help="also write everything, per query, here")
    args = parser.parse_args(argv)
    if missing := [str(d) for d in args.datasets if not (d / "corpus.jsonl").is_file()]:
        parser.error(f"not a BEIR collection (no corpus.jsonl): {', '.join(missing)}")
    work = args.work or Path(tempfile.mkdtemp(prefix="ranking_bench_"))
    base = Settings()
    out: list[dict[str, Any]] = []
    for dataset in args.datasets:
        load = os.getloadavg()
        c = run(dataset, base, work, args)
        print("\n".join(table(c)))
        print(f"seconds {c.seconds}; load average {load} -> {os.getloadavg()}; unreranked {c.unreranked}")
        print(f"adapt {json.dumps(c.adapt)}", flush=True)
        out.append({**asdict(c), "load_average": [load, os.getloadavg()]})
        if args.json:  # after each collection: a late failure keeps what was measured
            args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

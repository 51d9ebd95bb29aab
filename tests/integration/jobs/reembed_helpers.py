"""Small corpora and runs shared by the model-migration tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psycopg

from catalog import indexes
from catalog import jobs as jobs_repo
from catalog import reembed as reembed_repo
from catalog.jobs import NewItem
from catalog.maintenance import all_live_leaf_count
from catalog.principals import ensure_tenant
from core.records import Acl
from core.settings import Settings
from jobs.rebuild_job import rebuild
from jobs.reembed_job import ReembedArgs, ReembedConfig
from jobs.runner import IngestRunner
from tests import factories
from wiring.reembed import reembed_config

# Twelve topics, each a document and a query that paraphrases it.
TOPICS = [
    ("volcano", "Lava and ash erupt from the volcano crater as magma rises.", "molten rock eruption"),
    ("bread", "Knead the dough, let the yeast rise, then bake the loaf in a hot oven.", "baking a loaf"),
    ("chess", "The knight forks the king and the rook; checkmate follows in two moves.", "chess tactics"),
    ("tides", "The moon's gravity pulls the oceans, giving high and low tides twice a day.", "ocean tides"),
    ("vaccine", "A vaccine trains the immune system to recognise a virus before infection.", "immunisation"),
    ("jazz", "The saxophone improvises over swing rhythm while the bass walks.", "jazz improvisation"),
    ("glacier", "Glaciers carve U-shaped valleys as the ice slowly grinds the bedrock.", "ice erosion"),
    ("bitcoin", "Miners validate blocks of transactions on the blockchain ledger.", "cryptocurrency mining"),
    ("rose", "Prune the rose bush in early spring and feed it for summer blooms.", "gardening flowers"),
    ("marathon", "Runners train for months to finish the 42 kilometre race.", "long distance running"),
    ("photosynthesis", "Leaves turn sunlight, water and carbon dioxide into sugar.", "how plants make food"),
    (
        "compiler",
        "The compiler parses source code and emits optimised machine instructions.",
        "compiling code",
    ),
]


def write_beir(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    with (root / "corpus.jsonl").open("w") as f:
        for name, text, _ in TOPICS:
            f.write(json.dumps({"_id": name, "title": "", "text": text}) + "\n")
    with (root / "queries.jsonl").open("w") as f:
        for i, (_, _, query) in enumerate(TOPICS):
            f.write(json.dumps({"_id": f"q{i}", "text": query}) + "\n")
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n"
        + "".join(f"q{i}\t{name}\t1\n" for i, (name, _, _) in enumerate(TOPICS))
    )
    return root


def ingest(url: str, data_dir: Path, embedder, tenant: str, docs: list[tuple[str, str, Acl]]) -> None:
    with psycopg.connect(url) as conn:
        ensure_tenant(conn, tenant_id=tenant)
        items = [
            NewItem(
                external_id=ext, mime_type="text/plain", payload=text.encode(), acl=acl, byte_size=len(text)
            )
            for ext, text, acl in docs
        ]
        job = jobs_repo.create_job(conn, tenant_id=tenant, kind="ingest", items=items)
    runner = IngestRunner(factories.runner(url, data_dir, use_ray=False), lambda: embedder)
    assert runner.run_job(job) == "succeeded"


def topic_docs() -> list[tuple[str, str, Acl]]:
    return [(name, text, Acl((), True)) for name, text, _ in TOPICS]


def build_live(url: str, index_root: Path) -> str:
    """A first version with the bundled model, on the live alias."""
    version = rebuild(url, factories.rebuild(index_root, model_name="bundled:all-MiniLM-L6-v2", n_shards=2))
    with psycopg.connect(url) as conn, conn.transaction():
        indexes.swap_alias(conn, alias="live", version_id=version)
    return version


def migration_config(
    settings: Settings, url: str, model: Path, *, use_ray: bool = False, **args: Any
) -> ReembedConfig:
    config = reembed_config(
        settings,
        url,
        ReembedArgs(model=str(model), **args),
        actor="user:test-operator",
        use_ray=use_ray,
    )
    return replace(config, build=replace(config.build, n_shards=2))


# Thirty four-paragraph documents over twelve words: enough chunks that a backfill in batches of
# two is still running when it is killed.
WORDS = "orbit comet nebula galaxy quasar pulsar meteor asteroid planet moon star cluster".split()


def backfill_docs() -> list[tuple[str, str, Acl]]:
    return [
        (
            f"d{i}",
            "\n\n".join(" ".join(WORDS[(i + p + j) % 12] for j in range(40)) for p in range(4)),
            Acl((), True),
        )
        for i in range(30)
    ]


def _vectors(conn: psycopg.Connection, model: str) -> dict[int, Any]:
    rows = conn.execute("SELECT chunk_row, vector FROM chunk_embeddings WHERE model = %s", (model,))
    return dict(rows.fetchall())


@dataclass(frozen=True, slots=True)
class Killed:
    """What a migration killed mid-backfill left behind."""

    job_id: uuid.UUID
    total: int  # live leaf chunks
    committed: int  # of them with a target vector
    before: dict[int, Any]  # chunk_row -> the committed vector


def kill_mid_backfill(
    url: str, proc: subprocess.Popen[bytes], model: str, *, timeout_s: float, group: bool = False
) -> Killed:
    """SIGKILL the migration process (its process group with ``group``) once a few target
    vectors are committed; the kill must land mid-backfill and leave the job resumable."""
    with psycopg.connect(url, autocommit=True) as conn:
        total = all_live_leaf_count(conn)
        deadline, done = time.monotonic() + timeout_s, 0
        while time.monotonic() < deadline and done < 6 and proc.poll() is None:
            done = total - reembed_repo.missing_count(conn, model=model)
            time.sleep(0.05)
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        committed = total - reembed_repo.missing_count(conn, model=model)
        assert 0 < committed < total, "the kill must land mid-backfill"
        before = _vectors(conn, model)
        migration = reembed_repo.active_migration(conn)
        assert migration is not None  # a killed job stays resumable
    return Killed(migration.job_id, total, committed, before)


def assert_resumed(url: str, model: str, killed: Killed, report: dict[str, Any]) -> None:
    """The resumed run embedded exactly what the kill left missing, kept every committed vector
    as it was, and swapped the target model in."""
    assert report["resumed_with_vectors"] == killed.committed
    assert report["embedded_this_run"] == killed.total - killed.committed  # nothing re-embedded
    with psycopg.connect(url) as conn:
        after = _vectors(conn, model)
        assert len(after) == killed.total and all(after[r] == v for r, v in killed.before.items())
        live = indexes.resolve_alias(conn, alias="live")
        assert live is not None and live.embedding_model == model and live.chunk_count == killed.total

"""Jobs on a real two-node Ray cluster: ``ray start --head`` and ``ray start --address`` as
separate processes, each with its own custom resource; ``ragline ingest`` and ``ragline index
rebuild`` run unchanged against ``RAGLINE_RAY_ADDRESS`` in their own driver processes, so this
cluster never mixes with the session's local Ray."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from catalog import indexes as indexes_repo
from catalog import jobs as jobs_repo
from catalog import principals as principals_repo
from catalog.jobs import NewItem
from core.records import Acl
from index.manifest import read_manifest
from jobs.ingest_job import JobContext, stage_paths
from jobs.sources import load_source
from testkit.ports import free_port
from tests import factories

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
RAY = str(Path(sys.executable).parent / "ray")
START_TIMEOUT_S = 60
DOCS = 32  # enough batches (8 documents each) for two actors per stage
# Each runbook is about 20 KB (some 20 chunks), so embedding a batch of eight takes seconds on one
# CPU while preparing one takes a fraction of that: prepared batches queue at the embed stage, and
# the second one finds the first node's embed actor busy. With one-line notes the embed stage was
# the faster one, and the first idle actor could take every batch (CI failed so once). Actor
# locality does not settle it: Ray keeps a result under 100 KiB in the driver's memory, with no
# node, and reports a larger one's node only a moment after the task returns.
STEPS = 160


@dataclass(frozen=True, slots=True)
class Cluster:
    address: str
    env: dict[str, str]


def _node_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGLINE_", "RAY_ADDRESS"))}
    # Workers import ragline's modules by name, as the compose image has them installed.
    env.update(
        PYTHONPATH=str(REPO),
        RAY_USAGE_STATS_ENABLED="0",
        # Ray 2.5x turns token authentication on for `ray start`; this loopback cluster opts out
        # (docker-compose.yml shares one RAY_AUTH_TOKEN instead).
        RAY_AUTH_MODE="disabled",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


def _stop(procs: list[subprocess.Popen[bytes]], temp: Path) -> None:
    """End the nodes this test started: their process groups, then any of their processes
    (found by this test's own temp dir on their command line) that left the group."""
    import psutil

    for proc in reversed(procs):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=5)  # `ray start --block` is slow to act on SIGTERM
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    for leftover in psutil.process_iter(["pid", "cmdline"]):
        if any(str(temp) in part for part in leftover.info["cmdline"] or ()):
            leftover.kill()


def _ray_start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    # --block keeps `ray start` as the parent of the node's processes; a new session makes them
    # one process group, ended by its id at teardown (never `ray stop`, which would end every
    # Ray on this shared machine, the test session's own included).
    with log.open("wb") as out:
        return subprocess.Popen(
            [RAY, "start", "--block", "--disable-usage-stats", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _nodes(cluster: Cluster) -> list[dict[str, object]]:
    code = (
        "import json, sys, ray; ray.init(address=sys.argv[1], log_to_driver=False);"
        "print(json.dumps([{'id': n['NodeID'], 'alive': n['Alive'], 'resources': n['Resources']}"
        " for n in ray.nodes()]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, cluster.address],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    nodes: list[dict[str, object]] = json.loads(out.stdout.strip().splitlines()[-1])
    return [n for n in nodes if n["alive"]]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    temp = Path(tempfile.mkdtemp(prefix="rl-ray-", dir="/tmp"))  # short: Ray puts sockets here
    port = free_port()
    env = _node_env()
    head = _ray_start(
        [
            "--head",
            "--include-dashboard=false",
            f"--port={port}",
            f"--temp-dir={temp}",
            "--num-cpus=1",
            '--resources={"head": 1}',
            "--object-store-memory=200000000",
        ],
        env,
        temp / "head.log",
    )
    procs = [head]
    try:
        time.sleep(3)  # the GCS must listen before a worker node joins
        worker = _ray_start(
            [
                f"--address=127.0.0.1:{port}",
                "--num-cpus=1",
                '--resources={"worker": 1}',
                "--object-store-memory=200000000",
            ],
            env,
            temp / "worker.log",
        )
        procs.append(worker)
        cluster = Cluster(f"127.0.0.1:{port}", env)
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(_nodes(cluster)) < 2:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                logs = "\n".join(p.read_text()[-1500:] for p in temp.glob("*.log"))
                pytest.fail(f"the two-node cluster did not come up:\n{logs}")
            time.sleep(1)
        yield cluster
    finally:
        _stop(procs, temp)
        shutil.rmtree(temp, ignore_errors=True)


def _ragline(cluster: Cluster, db_url: str, data_dir: Path, *args: str) -> str:
    env = dict(cluster.env)
    env.update(
        RAGLINE_RAY_ADDRESS=cluster.address,
        RAGLINE_DATABASE_URL=db_url,
        RAGLINE_DATA_DIR=str(data_dir),
        RAGLINE_INGEST__INLINE_MAX_DOCUMENTS="0",  # every job through Ray
        RAGLINE_INGEST__WORKERS="2",
        RAGLINE_INGEST__PREPARE_WORKERS="2",
        RAGLINE_EMBEDDING_BACKEND="torch",
        RAGLINE_EMBEDDING_DEVICE="cpu",
        RAGLINE_INDEX__SHARDS="1",
    )
    out = subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, f"ragline {' '.join(args)}: {out.stdout[-1000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def test_ingest_and_rebuild_run_on_both_nodes(cluster: Cluster, db_url: str, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(DOCS):
        steps = "".join(
            f"Step {k} of runbook {n}: restart replica {k}, check the lag on shard {k % 7}, and page "
            f"the on-call engineer when it stays above {k} seconds.\n\n"
            for k in range(STEPS)
        )
        (docs / f"note-{n:02d}.md").write_text(f"# Note {n}\n\n{steps}")
    data = tmp_path / "data"
    out = _ragline(cluster, db_url, data, "ingest", str(docs), "--tenant", "acme", "--acl", "group:eng")
    job_id = uuid.UUID(out.strip().splitlines()[-1].split("\t")[0])
    nodes = _nodes(cluster)
    by_role = {role: n["id"] for n in nodes for role in ("head", "worker") if role in n["resources"]}  # type: ignore[operator]
    assert set(by_role) == {"head", "worker"}

    with psycopg.connect(db_url) as conn:
        job = jobs_repo.get_job(conn, job_id=job_id)
        assert job is not None and job.state == "succeeded", job
        assert job.documents_done == DOCS and job.chunks >= 15 * DOCS, job  # long runbooks (STEPS)
        placement = job.params["placement"]
        # Two prepare actors and two embed actors cannot share a one-CPU node, so each node hosts
        # both stages. Prepare work lands on both nodes; embed work does too, because batches
        # wait at the embed stage (STEPS) and one batch is in flight per embed actor.
        assert set(placement["prepare"]) == set(by_role.values()), placement
        assert set(placement["embed"]) == set(by_role.values()), placement

    out = _ragline(cluster, db_url, data, "index", "rebuild", "--swap", "live")
    with psycopg.connect(db_url) as conn:
        live = indexes_repo.resolve_alias(conn, alias="live")
        assert live is not None and live.state == "ready"
        assert live.chunk_count == job.chunks
    assert live.params["built_on"] in by_role.values()  # the rebuild ran as a task on a node
    assert read_manifest(Path(live.path)).shards


def test_files_named_by_path_are_staged_so_no_node_needs_the_drivers_disk(
    conn: psycopg.Connection, db_url: str, tmp_path: Path
) -> None:
    principals_repo.ensure_tenant(conn, tenant_id="acme")
    present, missing = tmp_path / "a.md", tmp_path / "gone.md"
    present.write_text("# A\n\nalpha bravo")
    items = [
        NewItem(external_id=p.name, mime_type="text/markdown", acl=Acl(public=True), payload_path=str(p))
        for p in (present, missing)
    ]
    job_id = jobs_repo.create_job(conn, tenant_id="acme", kind="ingest", items=items, params={})
    config = factories.runner(db_url, tmp_path)
    ctx = JobContext(
        job_id=job_id,
        tenant_id="acme",
        conninfo="",
        model_name=config.model_name,
        chunking=config.chunking,
        batch_documents=8,
        embedding=config.embedding,
        upload_dir=None,
        isolation=config.isolation,
    )
    assert stage_paths(conn, ctx, config.model_name) == 1
    present.unlink()  # a cluster node would not have it either
    pending = jobs_repo.items(conn, job_id=job_id, state="pending")
    assert [i.external_id for i in pending] == ["a.md"]
    assert load_source(conn, tenant_id="acme", item=pending[0]).content == b"# A\n\nalpha bravo"
    failed = jobs_repo.items(conn, job_id=job_id, state="failed")
    assert [(i.external_id, i.error_code) for i in failed] == [("gone.md", "source_unreadable")]

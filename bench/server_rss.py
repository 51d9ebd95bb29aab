"""The API process's resident memory after start-up and one inline ingest (issue 42).

Run: ``HF_HUB_OFFLINE=1 python -m bench.server_rss --runs 2`` (``--backend torch`` for the
PyTorch embedder; the default ``auto`` is ONNX on CPU when the ``onnx`` extra is installed).

Each run starts a real ``ragline serve`` (``testkit.server.ServerProcess``, one worker) on a
throwaway PostgreSQL and a fresh data dir, reads the server process's ``VmRSS`` from
``/proc/<pid>/status`` once it is ready, pushes one small document through the API (an inline
job: the ingest runner loads its embedder for it), waits for the job, and reads ``VmRSS``
(and the peak, ``VmHWM``) again. The ONNX export is made once, before the first server starts,
in a models folder every run's data dir links to, so no server pays for an export. Only the
server's own process is read: the parse workers it may start are other processes.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.common import print_table
from testkit.clusters import throwaway_cluster
from testkit.server import JOB_TIMEOUT_S, ServerProcess, auth, server_env

MODEL = "bundled:all-MiniLM-L6-v2"
DOC = {"external_id": "rss", "title": "Keys", "text": "Rotate the signing keys every day."}


@dataclass(frozen=True, slots=True)
class Sample:
    ready_mib: float
    ingested_mib: float
    peak_mib: float


def proc_status_mib(pid: int, field: str) -> float:
    """``field`` (``VmRSS``, ``VmHWM``) of ``/proc/<pid>/status``, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def make_export(models: Path) -> None:
    """The ONNX export every run's server loads (made here, so no server's memory holds it)."""
    from index.embedder import resolve_model_path
    from index.onnx_export import ensure_export, onnx_cache_dir

    ensure_export(resolve_model_path(MODEL), onnx_cache_dir(models.parent, MODEL))


def push_one(server: ServerProcess) -> None:
    """Push one document and wait for its job to succeed."""
    token = server.key("acme", "ingest")
    with httpx.Client(base_url=server.base_url, timeout=60.0, headers=auth(token)) as client:
        resp = client.post("/v1/documents", json={"documents": [DOC]})
        resp.raise_for_status()
        job_id = resp.json()["job_id"]
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while time.monotonic() < deadline:
            state = client.get(f"/v1/jobs/{job_id}").json()["state"]
            if state == "succeeded":
                return
            if state not in ("queued", "running"):
                raise RuntimeError(f"job {job_id} ended {state}:\n{server.log_tail()}")
            time.sleep(0.2)
    raise RuntimeError(f"job {job_id} did not finish in {JOB_TIMEOUT_S}s")


def run(models: Path, backend: str) -> Sample:
    with throwaway_cluster("ragline-bench-rss-") as (cluster, tmp):
        data = tmp / "data"
        data.mkdir()
        (data / "models").symlink_to(models)
        env = server_env(cluster.url, data, RAGLINE_EMBEDDING_BACKEND=backend)
        server = ServerProcess(env, tmp / "server.log")
        server.start()
        try:
            assert server.proc is not None
            pid = server.proc.pid
            ready = proc_status_mib(pid, "VmRSS")
            push_one(server)
            time.sleep(1.0)  # let the job's last writes and frees settle
            return Sample(ready, proc_status_mib(pid, "VmRSS"), proc_status_mib(pid, "VmHWM"))
        finally:
            server.kill()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--backend", default="auto", choices=["auto", "onnx", "torch"])
    args = p.parse_args(argv)
    print(f"command: {shlex.join(['python', '-m', 'bench.server_rss', *sys.argv[1:]])}")
    with tempfile.TemporaryDirectory(prefix="ragline-bench-rss-models-") as tmp:
        models = Path(tmp) / "models"
        models.mkdir()
        if args.backend != "torch":
            make_export(models)
        samples = [run(models, args.backend) for _ in range(args.runs)]
    rows = [
        [n + 1, f"{s.ready_mib:.0f}", f"{s.ingested_mib:.0f}", f"{s.peak_mib:.0f}"]
        for n, s in enumerate(samples)
    ]
    print(f"\nragline serve (embedding backend {args.backend}), server process memory in MiB:")
    print_table(["run", "VmRSS ready", "VmRSS after 1 inline ingest", "VmHWM"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

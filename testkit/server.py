"""A real ``ragline serve`` subprocess that tests and benchmarks start, wait for, kill -9 and
start again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI

from testkit.ports import free_port

REPO = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 180.0  # the search service loads the model (the ingest runner shares it)
JOB_TIMEOUT_S = 180.0


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class ServerNotReady(AssertionError):
    """The server exited, or did not answer ``/readyz`` with 200 in time (the message holds its
    log's tail). An AssertionError, so a test that meets it fails rather than errors."""


def serve_command(port: int, *, workers: int = 1) -> list[str]:
    """``ragline serve`` on loopback, run by this interpreter from the repository's code."""
    command = [sys.executable, "-m", "cli.main", "serve", "--host", "127.0.0.1", "--port", str(port)]
    return command + ["--workers", str(workers)] if workers != 1 else command


def log_tail(log_path: Path, chars: int = 4000) -> str:
    return log_path.read_text(errors="replace")[-chars:] if log_path.exists() else ""


def wait_ready(
    base_url: str, proc: subprocess.Popen[bytes], log_path: Path, *, timeout_s: float = READY_TIMEOUT_S
) -> None:
    """Poll ``/readyz`` until it answers 200; raises ServerNotReady when the process exits first
    or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerNotReady(f"server exited with {proc.returncode}:\n{log_tail(log_path)}")
        try:
            r = httpx.get(f"{base_url}/readyz", timeout=2.0)
            if r.status_code == 200:
                return
            last = r.text
        except httpx.TransportError as exc:
            last = type(exc).__name__
        time.sleep(0.3)
    raise ServerNotReady(f"server not ready after {timeout_s}s (last: {last}):\n{log_tail(log_path)}")


@contextmanager
def app_in_thread(
    app: FastAPI, *, start_timeout_s: float = 60.0, stop_timeout_s: float = 30.0
) -> Iterator[str]:
    """``app`` served by uvicorn on a free loopback port in a daemon thread, its lifespan run;
    yields the base URL once it is started, and stops it at exit. For tests that need a real
    socket (a client library, a browser, concurrent load) but also the app object itself."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + start_timeout_s
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise ServerNotReady(f"the in-thread server did not start in {start_timeout_s}s")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=stop_timeout_s)


def share_models(data_dir: Path, models: Path) -> None:
    """Point ``<data_dir>/models`` at a shared models folder (the session's ONNX exports), so a
    process on this data dir reuses them instead of exporting again. An export is found only
    when its meta matches the source model, and is published by an atomic rename, so sharing
    the folder between processes is safe."""
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "models").symlink_to(models, target_is_directory=True)


def server_env(db_url: str, data_dir: Path, *, models: Path | None = None, **extra: str) -> dict[str, str]:
    """A ``ragline serve`` / CLI subprocess's environment on ``db_url`` and ``data_dir``;
    ``models`` shares a models folder (``share_models``); ``extra`` adds variables."""
    if models is not None:
        share_models(data_dir, models)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGLINE_")}
    env.update(
        RAGLINE_DATABASE_URL=db_url,
        RAGLINE_DATA_DIR=str(data_dir),
        RAGLINE_INGEST__INLINE_MAX_DOCUMENTS="100",  # small jobs run in-process: no Ray start-up
        RAGLINE_EMBEDDING_DEVICE="cpu",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=str(REPO),
    )
    env.update(extra)
    return env


@dataclass
class ServerProcess:
    """``ragline serve`` with ``env`` on its own port, its output appended to ``log_path``;
    ``start`` returns once it is ready and may be called again after ``kill``."""

    env: dict[str, str]
    log_path: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.launch()
        try:
            self.wait_ready()
        except BaseException:  # a server that never came up is not left running
            self.kill()
            raise

    def launch(self) -> None:
        """Start the process without waiting for it: replicas load their models side by side."""
        with self.log_path.open("ab") as log:
            log.write(f"\n--- start {self.starts} ---\n".encode())
            self.proc = subprocess.Popen(
                serve_command(self.port),
                env=self.env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.starts += 1

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs, as in a power cut or an OOM kill."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def log_tail(self, chars: int = 4000) -> str:
        return log_tail(self.log_path, chars)

    def wait_ready(self) -> None:
        assert self.proc is not None, "start() first"
        wait_ready(self.base_url, self.proc, self.log_path)

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [sys.executable, "-m", "cli.main", *args],
            env=self.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if check:
            assert out.returncode == 0, f"ragline {' '.join(args)} failed: {out.stderr[-2000:]}"
        return out

    def key(self, tenant: str, *roles: str, principal: str | None = None) -> str:
        args = ["keys", "create", "--tenant", tenant]
        for role in roles:
            args += ["--role", role]
        if principal:
            args += ["--principal", principal]
        token = self.cli(*args).stdout.strip().splitlines()[-1]
        assert token and " " not in token, f"unexpected key output {token!r}"
        return token

"""A real ``ragline serve`` subprocess that tests can start, kill -9 and start again."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 180.0  # the ingest runner and the search service each load the model
JOB_TIMEOUT_S = 180.0


def free_port() -> int:
    """A free port below the ephemeral range (Linux: 32768-60999) and above Ray's worker ports
    (10002-19999): a server binds it seconds after it is chosen, after the model loads and
    other processes have opened connections, any of which could take an ephemeral port."""
    for port in random.sample(range(20_000, 32_000), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in 20000-32000")


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def server_env(db_url: str, data_dir: Path, **extra: str) -> dict[str, str]:
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
    env: dict[str, str]
    log_path: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            log.write(f"\n--- start {self.starts} ---\n".encode())
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                env=self.env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.starts += 1
        try:
            self.wait_ready()
        except BaseException:  # a server that never came up is not left running
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs, as in a power cut or an OOM kill."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = "no answer"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                r = httpx.get(f"{self.base_url}/readyz", timeout=2.0)
                if r.status_code == 200:
                    return
                last = r.text
            except httpx.TransportError as exc:
                last = type(exc).__name__
            time.sleep(0.3)
        raise AssertionError(f"server not ready after {READY_TIMEOUT_S}s (last: {last}):\n{self.log_tail()}")

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
        return self.cli(*args).stdout.strip().splitlines()[-1]

"""The deployment test: what the Dockerfile builds, started and used, without a container engine.

The Dockerfile's own COPY lines (with .dockerignore) lay out ``/app`` in a clean directory
(``tests/dockerctx.py``), its project RUN line (``pip install .[extras]``) becomes a wheel
built from that directory alone, and the wheel goes into a fresh virtualenv. That venv reaches
the already-installed third-party dependencies through a ``.pth`` line (the running
interpreter's site-packages; a plain path line runs none of the ``.pth`` hooks there, so the
checkout's editable install stays out), so every ragline module it imports is the wheel's.
Then, as the compose stack does: ``ragline migrate`` on a fresh database, ``ragline serve``,
``/readyz``, a key, a push, a search that finds the pushed document.

A Dockerfile that forgets a package (before issue 23 it never copied ``ragline_client/``, which
the server imports) fails here at ``ragline migrate`` with ``ModuleNotFoundError``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest

from testkit.ports import free_port
from testkit.server import auth, share_models, wait_ready
from tests.dockerctx import REPO, assemble_app, project_install_run

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PACKAGES = (
    "core", "catalog", "ingest", "index", "retrieve", "rerank", "authz", "jobs", "services", "wiring", "api",
    "evaluation", "cli", "ragline_client",
)  # fmt: skip


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False, **kwargs)  # type: ignore[call-overload]
    assert out.returncode == 0, (
        f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    )
    return out


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding only the wheel built from what the Dockerfile copies."""
    root = tmp_path_factory.mktemp("image")
    app = assemble_app(root / "rootfs")
    target = project_install_run()
    assert target.startswith("."), target
    dist = root / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", *_isolation(), "-w", str(dist), "."], cwd=app)
    (wheel,) = dist.glob("ragline-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    _run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", f"{wheel}{target[1:]}"])
    purelib = Path(
        _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    # After the install: pip in the new venv must not see the checkout's own ragline install.
    (purelib / "_shared_dependencies.pth").write_text("".join(p + "\n" for p in _dependency_dirs()))
    return venv


def _dependency_dirs() -> list[str]:
    """This interpreter's site-packages and those its ``.pth`` files added (a worktree's venv
    shares the main checkout's); not the checkout itself, which a worktree's ``.pth`` adds."""
    own = sysconfig.get_paths()["purelib"]
    dirs = [own] + [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    return list(dict.fromkeys(dirs))


def _isolation() -> list[str]:
    """No build isolation (nothing to download) when this setuptools builds wheels itself
    (70.1+); an older one (a fresh venv's 65) gets pip's isolated build environment."""
    import setuptools

    major, minor = (int(x) for x in setuptools.__version__.split(".")[:2])
    return ["--no-build-isolation"] if (major, minor) >= (70, 1) else []


def _env(db_url: str, data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGLINE_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(
        RAGLINE_DATABASE_URL=db_url,
        RAGLINE_DATA_DIR=str(data_dir),
        RAGLINE_INGEST__INLINE_MAX_DOCUMENTS="100",  # a small push runs in-process: no Ray start-up
        RAGLINE_EMBEDDING_DEVICE="cpu",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        RAY_USAGE_STATS_ENABLED="0",
    )
    return env


@pytest.fixture
def fresh_db(pg_url: str) -> Iterator[str]:
    """An empty database on the session's PostgreSQL: ``ragline migrate`` applies every migration."""
    name = f"image_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield urlunsplit(urlsplit(pg_url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_every_ragline_module_comes_from_the_wheel(image_venv: Path, tmp_path: Path) -> None:
    probe = (
        "import importlib.util, sys\n"
        "for p in sys.argv[1:]:\n"
        "    spec = importlib.util.find_spec(p)\n"
        "    print(spec.origin if spec else None)"
    )
    out = _run(
        [str(image_venv / "bin" / "python"), "-c", probe, *PACKAGES, "bench"],
        cwd=tmp_path,
        env=_env("", tmp_path),
    )
    *found, bench = out.stdout.split()
    origins = dict(zip(PACKAGES, found, strict=True))
    assert bench == "None", f"the benchmarks are a checkout's tool, not installed: {bench}"
    outside = {p: o for p, o in origins.items() if not o.startswith(str(image_venv))}
    assert not outside, f"not in the image's install (the Dockerfile does not copy them?): {outside}"


def test_the_image_migrates_serves_and_answers(
    image_venv: Path, fresh_db: str, tmp_path: Path, embedding_export: Path
) -> None:
    ragline = str(image_venv / "bin" / "ragline")
    # The session's ONNX export (the wheel's exporter is the checkout's: the same fingerprint);
    # exporting on a first start is tests/e2e/test_startup_output.py's.
    share_models(tmp_path / "data", embedding_export)
    env = _env(fresh_db, tmp_path / "data")
    work = tmp_path / "cwd"  # not the checkout: nothing may be imported from the working directory
    work.mkdir()
    migrations = sorted((REPO / "catalog" / "migrations").glob("*.sql"))
    out = _run([ragline, "migrate"], cwd=work, env=env)
    assert f"applied {len(migrations)} migration(s)" in out.stdout, out.stdout

    key = _run(
        [
            ragline,
            "keys",
            "create",
            "--tenant",
            "acme",
            "--role",
            "ingest",
            "--role",
            "query",
            "--principal",
            "user:a",
        ],
        cwd=work,
        env=env,
    ).stdout.split()[-1]
    port = free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [ragline, "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, proc, log_path)
        with httpx.Client(base_url=base, timeout=60.0, headers=auth(key)) as client:
            text = "The loading dock on the north side closes at six; deliveries after that go to reception."
            doc = {"external_id": "dock", "text": text, "acl": {"principals": ["user:a"]}}
            r = client.post("/v1/documents", json={"documents": [doc]})
            assert r.status_code == 202, r.text
            job_id = r.json()["job_id"]
            for _ in range(600):
                job = client.get(f"/v1/jobs/{job_id}").json()
                if job["state"] not in ("queued", "running"):
                    break
                time.sleep(0.2)
            assert job["state"] == "succeeded", job
            found = client.post(
                "/v1/retrieve", json={"query": "when does the loading dock close?", "top_k": 3}
            )
            assert found.status_code == 200, found.text
            assert [h["document_external_id"] for h in found.json()["results"]][:1] == ["dock"], found.json()
            assert client.get("/docs").status_code == 200
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)

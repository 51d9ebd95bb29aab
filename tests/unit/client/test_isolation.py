"""The client distribution stands alone: its modules import only the standard library,
defusedxml, httpx, pydantic and tenacity (what clients/python/pyproject.toml declares), the adapter
modules add only their own extra's packages, and it imports and runs in a process where
torch, faiss, Ray, numpy, every server package and every extra's packages are absent."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGE = REPO / "ragline_client"
SERVER_PACKAGES = (
    "core",
    "catalog",
    "ingest",
    "index",
    "retrieve",
    "rerank",
    "authz",
    "jobs",
    "wiring",
    "api",
)
# The modules of each optional extra and the import roots that extra installs.
EXTRA_MODULES = {
    "langchain.py": ("langchain", {"langchain_core"}),
    "llama_index.py": ("llamaindex", {"llama_index"}),
    "mcp_server.py": ("mcp", {"mcp"}),
}
EXTRAS_IMPORTS = ("langchain_core", "llama_index", "mcp")
HEAVY = ("torch", "faiss", "ray", "numpy", "sentence_transformers", "fitz", "psycopg", "fastapi", "starlette")


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_static_imports_are_stdlib_and_declared_dependencies() -> None:
    declared = tomllib.loads((REPO / "clients" / "python" / "pyproject.toml").read_text())["project"]
    deps = {d.split(">")[0].split("=")[0].split("[")[0].strip() for d in declared["dependencies"]}
    assert deps == {"defusedxml", "httpx", "pydantic", "tenacity"}
    extras = declared["optional-dependencies"]
    for module in PACKAGE.rglob("*.py"):
        third_party = _imported_roots(module) - set(sys.stdlib_module_names) - {"__future__"}
        allowed = deps | {"ragline_client"}
        if module.name in EXTRA_MODULES:
            extra, roots = EXTRA_MODULES[module.name]
            assert extras[extra], extra
            allowed |= roots
        assert third_party <= allowed, (module.name, third_party - allowed)


_PROBE = """
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BLOCKED = set(sys.argv[1].split(","))

class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not installed here")

sys.meta_path.insert(0, Absent())

class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"status": "ok"}'
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

import ragline_client
from ragline_client import Client, Connector, Syncer

server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
threading.Thread(target=server.serve_forever, daemon=True).start()
with Client(f"http://127.0.0.1:{server.server_address[1]}", "k") as client:
    status = client.health().status
server.shutdown()
print(json.dumps({"status": status, "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def test_imports_and_runs_without_torch_faiss_ray_or_the_server() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, ",".join(HEAVY + SERVER_PACKAGES + EXTRAS_IMPORTS)],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["status"] == "ok"
    loaded = set(result["modules"])
    assert not loaded & set(HEAVY + SERVER_PACKAGES), sorted(loaded & set(HEAVY + SERVER_PACKAGES))
    assert {"ragline_client", "httpx", "pydantic", "tenacity"} <= loaded


def test_server_answers_with_the_clients_models() -> None:
    """One definition, not two copies: every wire model the server declares is the client's."""
    import api.errors
    import api.schemas
    from ragline_client import models

    shared = [n for n in api.schemas.__all__ if hasattr(models, n)]
    assert {"DocumentIn", "PushResponse", "JobOut", "RetrieveOut", "ConnectorStateOut", "MeOut"} <= set(
        shared
    )
    assert all(getattr(api.schemas, n) is getattr(models, n) for n in shared)
    assert api.errors.ErrorBody is models.ErrorBody

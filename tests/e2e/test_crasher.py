"""Crash consistency: a mixed writer against a real server that is killed with SIGKILL at
random moments and restarted each time. After every restart, every acknowledged write is
there, nothing is duplicated, orphaned or invented, ``ragline index verify`` is clean, and
for every principal the chunks ``/v1/retrieve`` can reach equal the catalog oracle. A rebuild
killed mid-way leaves the old version serving and its partial version unaliased."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from testkit.server import JOB_TIMEOUT_S, REPO, ServerProcess, auth, server_env
from testkit.sizes import size

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TENANT = "acme"
WORD = "zephyrcrash"  # in every document: a lexical query for it reaches every readable chunk
DOCS = [f"doc-{i}" for i in range(8)]
ACLS: list[dict[str, object]] = [
    {"principals": [], "public": True},
    {"principals": ["group:eng"], "public": False},
    {"principals": ["group:ops"], "public": False},
    {"principals": ["user:cy"], "public": False},
    {"principals": ["group:ops", "user:ann"], "public": False},
]
GROUPS = {"user:ann": ["group:eng"], "user:bob": ["group:ops"], "user:cy": []}
# Two kills in the suite: the second lands on a server that itself restarted after a kill (its
# jobs taken over from a dead lease, its index reloaded), the case one kill cannot reach; each
# further kill only samples another moment, which the soak run does five times.
KILLS = size(2, 5)
WARMUP = 10  # acknowledged writes before the first kill


@dataclass(frozen=True)
class Doc:
    text: str
    acl: tuple[tuple[str, ...], bool]


State = dict[str, Doc | None]  # external id -> what the catalog must hold (None: absent or deleted)


@pytest.fixture
def server(db_url: str, tmp_path: Path, embedding_export: Path) -> Iterator[ServerProcess]:
    env = server_env(
        db_url,
        tmp_path / "data",
        models=embedding_export,
        RAGLINE_INGEST__JOB_LEASE_SECONDS="4",  # a dead server's job is taken over within seconds
        RAGLINE_INDEX__MAINTENANCE_SECONDS="0",  # the test runs its own rebuilds
    )
    srv = ServerProcess(env, tmp_path / "server.log")
    try:
        srv.start()
        yield srv
    finally:
        srv.kill()


def _acl(spec: dict[str, Any]) -> tuple[tuple[str, ...], bool]:
    return tuple(sorted(spec["principals"])), bool(spec["public"])


def _readable(doc: Doc, principal: str) -> bool:
    principals, public = doc.acl
    return public or principal in principals or any(g in principals for g in GROUPS[principal])


class Writer:
    """Random pushes (new and changed text), ACL changes and deletes; remembers what was acked."""

    def __init__(self, server: ServerProcess, ingest_key: str, seed: int) -> None:
        self.server, self.key, self.rng = server, ingest_key, random.Random(seed)
        self.state: State = dict.fromkeys(DOCS)
        self.uncertain: dict[str, tuple[Doc | None, Doc | None]] = {}
        self.version = 0
        self.acked = 0

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.server.base_url, headers=auth(self.key), timeout=30.0)

    def step(self, client: httpx.Client, *, wait: bool, avoid: set[str] | None = None) -> str:
        """One random write; with ``wait`` a push is acknowledged when its job has finished.

        ``avoid``: documents not to touch (an unwaited push to them may still be queued, so a
        delete or ACL change on them could overtake it); returns the document written.
        """
        ext = self.rng.choice([d for d in DOCS if d not in (avoid or set())])
        before = self.state[ext]
        roll = self.rng.random()
        if before is not None and roll < 0.2:
            after: Doc | None = None
            call = lambda: client.delete(f"/v1/documents/{ext}")  # noqa: E731
        elif before is not None and roll < 0.4:
            spec = self.rng.choice(ACLS)
            after = Doc(before.text, _acl(spec))
            call = lambda: client.put(f"/v1/documents/{ext}/acl", json=spec)  # noqa: E731
        else:
            self.version += 1
            spec = self.rng.choice(ACLS)
            text = f"# {ext}\n\n{WORD} revision {self.version} of {ext}. " + "filler words here. " * 5
            after = Doc(text, _acl(spec))
            body = {
                "documents": [{"external_id": ext, "text": text, "mime_type": "text/markdown", "acl": spec}]
            }
            call = lambda: client.post("/v1/documents", json=body)  # noqa: E731
        self.uncertain[ext] = (before, after)
        try:
            r = call()
        except httpx.TransportError:
            return ext  # killed before it answered: either outcome is allowed
        assert r.status_code in (200, 202), r.text
        # Acknowledged: from here on only ``after`` is allowed (a push's job finishes after a restart).
        self.state[ext] = after
        self.acked += 1
        self.uncertain.pop(ext)
        if wait and r.status_code == 202:
            self.wait_jobs(client)
        return ext

    def wait_jobs(self, client: httpx.Client) -> None:
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while time.monotonic() < deadline:
            # Queued first: a job only moves queued -> running -> finished, so asking in this
            # order cannot miss one that starts between the two questions.
            q = client.get("/v1/jobs", params={"state": "queued"})
            r = client.get("/v1/jobs", params={"state": "running"})
            assert r.status_code == q.status_code == 200, (r.text, q.text)
            if not r.json() and not q.json():
                return
            time.sleep(0.2)
        raise AssertionError(f"jobs still unfinished after {JOB_TIMEOUT_S}s:\n{self.server.log_tail()}")

    def settle(self, conn: psycopg.Connection) -> None:
        """Resolve writes whose answer was lost in a kill: the catalog must hold before or after."""
        held = _catalog_state(conn)
        for ext, (before, after) in self.uncertain.items():
            assert held[ext] in (before, after), f"{ext}: {held[ext]} is neither {before} nor {after}"
            self.state[ext] = held[ext]
        self.uncertain.clear()


def _catalog_state(conn: psycopg.Connection) -> State:
    state: State = dict.fromkeys(DOCS)
    rows = conn.execute(
        "SELECT d.external_id, d.acl_principals, d.acl_public, string_agg(c.text, ' ' ORDER BY c.ordinal)"
        " FROM documents d JOIN chunks c ON c.doc_id = d.doc_id AND c.version = d.current_version"
        " AND c.level = 0 WHERE d.tenant_id = %s AND d.state = 'active'"
        " GROUP BY d.external_id, d.acl_principals, d.acl_public",
        (TENANT,),
    ).fetchall()
    for ext, principals, public, text in rows:
        assert ext in state, f"phantom document {ext}"
        rev = text.split(" revision ", 1)[1].split(" ", 1)[0]
        state[ext] = Doc(_expected_text(ext, int(rev)), (tuple(sorted(principals)), public))
    return state


def _expected_text(ext: str, rev: int) -> str:
    return f"# {ext}\n\n{WORD} revision {rev} of {ext}. " + "filler words here. " * 5


def _check_catalog(conn: psycopg.Connection) -> None:
    dup = conn.execute("SELECT chunk_id FROM chunks GROUP BY chunk_id HAVING count(*) > 1").fetchall()
    assert dup == [], f"duplicated chunks {dup}"
    orphans = conn.execute(
        "SELECT c.chunk_row FROM chunks c LEFT JOIN document_versions v"
        " ON v.doc_id = c.doc_id AND v.version = c.version WHERE v.doc_id IS NULL"
    ).fetchall()
    assert orphans == [], f"chunks of no document version {orphans}"
    counts = conn.execute(
        "SELECT d.external_id, v.chunk_count, count(c.chunk_row)"
        " FROM documents d JOIN document_versions v ON v.doc_id = d.doc_id AND v.version = d.current_version"
        " LEFT JOIN chunks c ON c.doc_id = v.doc_id AND c.version = v.version"
        " GROUP BY d.external_id, v.chunk_count"
    ).fetchall()
    assert all(n == leaves for _, n, leaves in counts), counts
    missing = conn.execute(
        "SELECT c.chunk_row FROM chunks c JOIN documents d ON d.doc_id = c.doc_id"
        " AND d.current_version = c.version AND d.state = 'active'"
        " LEFT JOIN chunk_embeddings e ON e.chunk_row = c.chunk_row WHERE c.level = 0 AND e.chunk_row IS NULL"
    ).fetchall()
    assert missing == [], f"live chunks without a vector {missing}"


def _check_retrieve(server: ServerProcess, keys: dict[str, str], state: State) -> None:
    with httpx.Client(base_url=server.base_url, timeout=30.0) as client:
        for principal, key in keys.items():
            for mode in ("lexical", "hybrid"):
                r = client.post(
                    "/v1/retrieve",
                    json={"query": WORD, "top_k": 100, "mode": mode, "max_context_tokens": 16},
                    headers=auth(key),
                )
                assert r.status_code == 200, r.text
                got = {hit["document_external_id"] for hit in r.json()["results"]}
                want = {ext for ext, doc in state.items() if doc is not None and _readable(doc, principal)}
                if mode == "lexical":
                    assert got == want, (principal, got, want)
                else:  # dense candidates may add chunks without the word, never unreadable ones
                    assert want <= got and all(_readable_ext(state, e, principal) for e in got), (
                        principal,
                        got,
                    )


def _readable_ext(state: State, ext: str, principal: str) -> bool:
    doc = state.get(ext)
    return doc is not None and _readable(doc, principal)


@pytest.mark.soak
def test_crash_consistency(server: ServerProcess, db_url: str) -> None:
    ingest = server.key(TENANT, "ingest")
    admin = server.key(TENANT, "admin")
    keys = {p: server.key(TENANT, "query", principal=p) for p in GROUPS}
    with httpx.Client(base_url=server.base_url, headers=auth(admin), timeout=30.0) as client:
        for principal, groups in GROUPS.items():
            assert (
                client.put(f"/v1/principals/{principal}/groups", json={"groups": groups}).status_code == 200
            )
    writer = Writer(server, ingest, seed=7)
    with writer.client() as client:
        for _ in range(WARMUP):
            writer.step(client, wait=True)
    server.cli("index", "rebuild", "--swap", "live")
    rng = random.Random(11)
    for kill in range(KILLS):
        with writer.client() as client:
            for _ in range(rng.randint(2, 5)):
                writer.step(client, wait=True)
            # The last write races the kill: it may land before, during or after its commit.
            killer = threading.Timer(rng.uniform(0.0, 0.6), server.kill)
            killer.start()
            touched: set[str] = set()
            for _ in range(3):  # three different documents: no write waits on another's job
                touched.add(writer.step(client, wait=False, avoid=touched))
            killer.join()
        server.kill()
        server.start()
        with writer.client() as client:
            writer.wait_jobs(client)
        with psycopg.connect(db_url) as conn:
            writer.settle(conn)
            assert _catalog_state(conn) == writer.state, f"after kill {kill}"
            _check_catalog(conn)
        verify = server.cli("index", "verify", check=False)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        _check_retrieve(server, keys, writer.state)
    # At least two waited writes per kill are acknowledged (20 at the soak run's five kills).
    assert writer.acked >= WARMUP + 2 * KILLS and server.starts == KILLS + 1


def test_a_rebuild_killed_midway_is_never_aliased(server: ServerProcess, db_url: str) -> None:
    ingest = server.key(TENANT, "ingest")
    writer = Writer(server, ingest, seed=3)
    with writer.client() as client:
        for _ in range(6):
            writer.step(client, wait=True)
    server.cli("index", "rebuild", "--swap", "live")
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT version_id FROM index_aliases WHERE alias = 'live'").fetchone()
        assert row is not None
        (live,) = row
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "index", "rebuild", "--swap", "live"],
        env=server.env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # Kill once the new version is registered (building) and before it can be swapped in.
    deadline = time.monotonic() + 60
    with psycopg.connect(db_url, autocommit=True) as conn:
        while time.monotonic() < deadline and proc.poll() is None:
            if conn.execute("SELECT 1 FROM index_versions WHERE state = 'building'").fetchone():
                break
            time.sleep(0.01)
        proc.kill()
        proc.wait(timeout=30)
        rows = conn.execute("SELECT version_id, state FROM index_versions ORDER BY created_at").fetchall()
        assert conn.execute("SELECT version_id FROM index_aliases WHERE alias = 'live'").fetchone() == (live,)
    partial = [v for v, s in rows if v != live]
    assert partial and all(s in ("building", "ready") for v, s in rows if v != live), rows
    with httpx.Client(base_url=server.base_url, timeout=30.0) as client:
        key = server.key(TENANT, "query", principal="user:ann")
        r = client.post("/v1/retrieve", json={"query": WORD, "top_k": 5}, headers=auth(key))
        assert r.status_code == 200 and r.json()["index_version"] == live, r.text
    verify = server.cli("index", "verify", check=False)
    assert verify.returncode == 0, verify.stdout

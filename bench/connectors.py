"""First sync, no-change sync and an ACL-only change for the fs, git and SQL connectors, in
one run against one real server.

Run: ``python -m bench.connectors --n 1000``.

Each connector runs as the real command (``ragline connect fs|git|sql|imap --json``, a
subprocess) over the same ``n`` generated texts: files in a directory (fs, the baseline), the
same files committed to a Git repository (git), rows of a table in a second database on the
same PostgreSQL (sql). Requests are what the server counted (``/metrics``, every route but
``/metrics`` itself), so they include the CLI's own ``/v1/me`` and state reads. Seconds are
wall time of the command, process start included (``ragline --help`` on its own is shown
for scale). The ACL-only change removes one reader at the source (from one item in the ACL map or
the ACL join table; from one of 10 IMAP folders, so from a tenth of the messages) and must
cost one ``PUT .../acl`` per item it touches, no push. IMAP (``--only ...,imap``) needs
``dovecot-imapd``: ``n`` messages in 10 folders of one account, on a Dovecot started here.
"""

from __future__ import annotations

import argparse
import imaplib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import httpx
import psycopg
from prometheus_client.parser import text_string_to_metric_families
from psycopg.conninfo import make_conninfo

from bench import dovecot
from bench.common import generated_texts, print_table
from bench.retrieve import TENANT, database, server

REPO = Path(__file__).resolve().parents[1]
CONNECTORS = ("fs", "git", "sql", "imap")
IMAP_FOLDERS = 10
SQL_SPEC = """
query = "SELECT id, title, body, updated_at FROM notes"
key = "id"
title = "title"
text = ["body"]
updated = "updated_at"
acl_query = "SELECT note_id, principal FROM note_readers"
"""


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Connector sync cost (see module docstring).")
    p.add_argument("--n", type=int, default=1000, help="files / rows per connector")
    p.add_argument("--words", type=int, default=80, help="words per generated text")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", default=",".join(CONNECTORS), help="comma-separated connectors to run")
    return p.parse_args()


def requests_served(base: str) -> dict[str, int]:
    """``METHOD route`` -> requests the server has answered so far."""
    counts: dict[str, int] = {}
    text = httpx.get(f"{base}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        if family.name != "ragline_http_request_duration_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_count") and sample.labels["route"] != "/metrics":
                name = f"{sample.labels['method']} {sample.labels['route']}"
                counts[name] = counts.get(name, 0) + int(sample.value)
    return counts


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@example.com"}
    env |= {"GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}
    subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True)


def _sources(tmp: Path, url: str, texts: list[str]) -> tuple[Path, Path, str]:
    tree, repo = tmp / "tree", tmp / "repo"
    for root in (tree, repo):
        for i, text in enumerate(texts):
            path = root / f"team-{i % 10}" / f"note-{i:05d}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"# Note {i}\n\n{text}\n")
    _git(repo, "init", "--quiet", "--initial-branch=main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "--quiet", "-m", "notes")
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS bench_source")
        admin.execute("CREATE DATABASE bench_source")
    dsn = make_conninfo(url, dbname="bench_source")
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "CREATE TABLE notes (id integer PRIMARY KEY, title text, body text,"
            " updated_at timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute("CREATE TABLE note_readers (note_id integer, principal text)")
        with conn.cursor().copy("COPY notes (id, title, body) FROM STDIN") as copy:
            for i, text in enumerate(texts):
                copy.write_row((i, f"Note {i}", text))
        with conn.cursor().copy("COPY note_readers FROM STDIN") as copy:
            for i in range(len(texts)):
                copy.write_row((i, f"group:team-{i % 10}"))
                copy.write_row((i, "user:lead"))
    return tree, repo, dsn


def _acl_map(path: Path, *, lead: bool) -> None:
    rules = {f"team-{t}/*": {"principals": [f"group:team-{t}"]} for t in range(10)}
    # The ACL-only change: user:lead stops reading note 0.
    first = {"principals": ["group:team-0"] + ([] if not lead else ["user:lead"])}
    path.write_text(json.dumps({"team-0/note-00000.md": first, **rules, "*": {"principals": ["user:lead"]}}))


def _cli(base: str, key: str, args: list[str]) -> tuple[float, dict[str, int], dict[str, int]]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAGLINE_API_URL": base, "RAGLINE_API_KEY": key}
    before = requests_served(base)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "connect", *args, "--json"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"ragline connect {args[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout.strip().splitlines()[-1]), _delta(requests_served(base), before)


def _mailbox(imap_server: dovecot.Dovecot, texts: list[str]) -> None:
    """ann's messages in ``IMAP_FOLDERS`` folders, each readable by lead."""
    imap = imaplib.IMAP4(imap_server.host, imap_server.port)
    imap.login("ann", imap_server.password)
    for f in range(IMAP_FOLDERS):
        imap.create(f"Notes-{f}")
        imap.setacl(f"Notes-{f}", "lead", "lr")
    for i, text in enumerate(texts):
        raw = f"From: ann@example.com\r\nTo: lead@example.com\r\nSubject: Note {i}\r\n"
        raw += f"Message-ID: <n{i}@example.com>\r\n\r\n{text}\r\n"
        imap.append(f"Notes-{i % IMAP_FOLDERS}", None, None, raw.encode())
    imap.logout()


def _revoke_folder(imap_server: dovecot.Dovecot) -> None:
    imap = imaplib.IMAP4(imap_server.host, imap_server.port)
    imap.login("ann", imap_server.password)
    imap.deleteacl("Notes-0", "lead")
    imap.logout()


def main() -> None:
    args = _args()
    only = [c for c in args.only.split(",") if c]
    texts = generated_texts(args.n, args.words, seed=args.seed)
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory(prefix="ragline-connectors-") as name, ExitStack() as stack:
        tmp = Path(name)
        with database(tmp) as url:
            from authz.api_keys import create_key

            # A tenant per connector: the same paths must not meet as the same documents.
            with psycopg.connect(url) as conn:
                keys = {
                    c: create_key(conn, tenant_id=f"{TENANT}-{c}", roles=["ingest"]).token for c in CONNECTORS
                }
            tree, repo, dsn = _sources(tmp, url, texts)
            (tmp / "q.toml").write_text(SQL_SPEC)
            amap = tmp / "acl.json"
            runs: dict[str, tuple[list[str], Callable[[], None]]] = {
                "fs": (["fs", str(tree), "--acl-map", str(amap)], lambda: _acl_map(amap, lead=False)),
                "git": (
                    ["git", str(repo), "--acl-map", str(amap), "--cache-dir", str(tmp / "cache")],
                    lambda: _acl_map(amap, lead=False),
                ),
                "sql": (["sql", dsn, "--query-file", str(tmp / "q.toml")], lambda: _revoke(dsn)),
            }
            if "imap" in only:
                imap_server = stack.enter_context(dovecot.dovecot(("ann", "lead")))
                _mailbox(imap_server, texts)
                (tmp / "pw").write_text(imap_server.password)
                imap_url = f"imap://ann@{imap_server.host}:{imap_server.port}"
                runs["imap"] = (
                    ["imap", imap_url, "--password-file", str(tmp / "pw")],
                    lambda: _revoke_folder(imap_server),
                )
            runs = {k: v for k, v in runs.items() if k in only}
            (tmp / "data").mkdir()
            with server(url, tmp / "data") as (base, _pid):
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "cli.main", "--help"], cwd=REPO, capture_output=True)
                startup = time.perf_counter() - start
                for label, (cli_args, revoke) in runs.items():
                    _acl_map(amap, lead=True)
                    for phase in ("first sync", "no change", "ACL-only change"):
                        if phase == "ACL-only change":
                            revoke()
                        cli_run = [*cli_args, "--tenant", f"{TENANT}-{label}"]
                        seconds, summary, served = _cli(base, keys[label], cli_run)
                        rows.append(_row(label, phase, seconds, summary, served))
    load = os.getloadavg()
    print(
        f"\n{args.n:,} items x {args.words} words per connector, one server, {os.cpu_count()} CPUs,"
        f" load {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}; `ragline --help` alone: {startup:.2f} s"
    )
    headers = ["connector", "run", "seconds", "requests", "writes", "pushed", "unchanged", "acl", "failed"]
    print_table(headers, rows)


def _revoke(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM note_readers WHERE note_id = 0 AND principal = 'user:lead'")


def _row(
    label: str, phase: str, seconds: float, summary: dict[str, int], served: dict[str, int]
) -> list[object]:
    writes = sum(v for k, v in served.items() if not k.startswith("GET "))
    acl = sum(v for k, v in served.items() if k.startswith("PUT ") and k.endswith("/acl"))
    return [
        label,
        phase,
        round(seconds, 2),
        sum(served.values()),
        writes,
        summary["pushed"],
        summary["unchanged"],
        acl,
        summary["failed"],
    ]


if __name__ == "__main__":
    main()

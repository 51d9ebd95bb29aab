"""The local cluster's port (``make run`` on a machine where 54329 is taken, issue 23).

Before: the port was written into postgresql.conf at ``initdb``, so ``RAGLINE_PG_PORT`` did
nothing until ``make clean``; a taken port gave "pg_ctl failed ... Examine the log output"
with neither the port nor the log's path; commands run without the variable looked for the
cluster on 54329 (``ragline keys list`` died with a traceback, ``ragline db status`` printed
the wrong port).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from catalog import embedded
from core.errors import ConfigError
from testkit.ports import free_port
from testkit.server import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another process listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield int(other.getsockname()[1])


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "data"
    cluster = embedded.cluster_for(tmp_path / "data", port=None, fsync=False)
    embedded.destroy(cluster)


def _cli(data_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAGLINE_")}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        env={**clean, "RAGLINE_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO), **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_taken_port_that_was_asked_for_is_named(data_dir: Path, taken_port: int) -> None:
    cluster = embedded.cluster_for(data_dir, port=taken_port, fsync=False)
    with pytest.raises(ConfigError) as err:
        embedded.up(cluster)
    message = str(err.value)
    assert f"port {taken_port}" in message and "taken" in message and "RAGLINE_PG_PORT" in message, message
    assert not embedded.is_running(cluster)


def test_a_taken_default_port_gives_way_to_a_free_one(
    data_dir: Path, taken_port: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(embedded, "DEFAULT_PORT", taken_port)
    cluster = embedded.cluster_for(data_dir, port=None, fsync=False)
    with caplog.at_level(logging.WARNING, logger="catalog.embedded"):
        url = embedded.up(cluster)
    port = embedded.running_port(cluster)
    assert port is not None and port != taken_port and f"port={port}" in url
    assert any(str(taken_port) in r.getMessage() and str(port) in r.getMessage() for r in caplog.records)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("ragline",)
    assert embedded.up(embedded.cluster_for(data_dir, port=None, fsync=False)) == url  # found, not restarted


def test_the_port_is_chosen_at_each_start_not_at_initdb(data_dir: Path, taken_port: int) -> None:
    first = embedded.cluster_for(data_dir, port=free_port(), fsync=False)
    embedded.up(first)
    embedded.down(first)
    # Another RAGLINE_PG_PORT (as after another PostgreSQL took 54329) must be enough, without
    # deleting the cluster: the port written at initdb does not stick.
    moved = embedded.cluster_for(data_dir, port=free_port(), fsync=False)
    url = embedded.up(moved)
    assert embedded.running_port(moved) == moved.port and f"port={moved.port}" in url
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    embedded.down(moved)
    blocked = embedded.cluster_for(data_dir, port=taken_port, fsync=False)
    with pytest.raises(ConfigError, match=f"port {taken_port}"):
        embedded.up(blocked)


def test_commands_reach_the_cluster_on_the_port_it_runs_on(data_dir: Path) -> None:
    port = free_port()
    up = _cli(data_dir, "db", "up", RAGLINE_PG_PORT=str(port))
    assert up.returncode == 0, up.stderr
    # Without RAGLINE_PG_PORT, as in a second terminal after `RAGLINE_PG_PORT=... make run`:
    status = _cli(data_dir, "db", "status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["port"] == port and json.loads(status.stdout)["running"] is True
    assert f"port={port}" in _cli(data_dir, "db", "url").stdout
    assert _cli(data_dir, "migrate").returncode == 0
    keys = _cli(data_dir, "keys", "list")
    assert keys.returncode == 0 and "Traceback" not in keys.stderr, keys.stderr
    assert _cli(data_dir, "db", "down").returncode == 0
    stopped = _cli(data_dir, "db", "status", "--json", RAGLINE_PG_PORT=str(port + 1))
    assert stopped.returncode == 3 and json.loads(stopped.stdout)["port"] == port + 1


def test_an_unreachable_database_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    out = _cli(
        tmp_path, "keys", "list", RAGLINE_DATABASE_URL=f"postgresql://ragline@127.0.0.1:{free_port()}/x"
    )
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "cannot reach PostgreSQL" in out.stderr, out.stderr


def test_a_start_that_fails_names_the_port_and_the_log(data_dir: Path) -> None:
    cluster = embedded.cluster_for(data_dir, port=free_port(), fsync=False)
    embedded.up(cluster)
    embedded.down(cluster)
    with (cluster.pgdata / "postgresql.conf").open("a") as conf:
        conf.write("no_such_setting = 1\n")  # any failure pg_ctl reports only as "Examine the log output"
    with pytest.raises(ConfigError) as err:
        embedded.up(cluster)
    message = str(err.value)
    assert f"port {cluster.port}" in message and str(cluster.log_file) in message, message
    assert "no_such_setting" in message, message  # the log's last lines, quoted

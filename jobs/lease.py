"""A claimed job's heartbeat: its lease is renewed from a thread of its own while it runs.

A job's lease was renewed only between batches, so a worker busy starting up (Ray, a model
load) on a loaded machine went silent past ``job_lease_seconds``: another worker took the job
over while this one was alive and about to work (issue 44). A worker that is alive keeps its
lease now, from the claim to the end of the job; only a dead process (or a stuck one an
operator moves with ``ragline jobs resume``) loses it. The batch boundaries still renew and
read the answer (a cancel, a takeover): this thread only keeps the heartbeat fresh.
"""

from __future__ import annotations

import logging
import threading
import uuid

import psycopg

from catalog import jobs as jobs_repo

log = logging.getLogger(__name__)

# Beats per lease: a beat may be late or fail (a busy machine, a brief outage) three times
# before the lease runs out.
BEATS_PER_LEASE = 4


class LeaseKeeper:
    """Renews ``owner``'s lease on a running job every ``lease_seconds / 4`` until closed.

    It stops on its own when the job is no longer ours (a takeover, an operator's resume) or
    no longer running; a failed renewal (the database away) is retried at the next beat on a
    new connection.
    """

    def __init__(self, conninfo: str, *, job_id: uuid.UUID, owner: str, lease_seconds: float) -> None:
        self.conninfo = conninfo
        self.job_id = job_id
        self.owner = owner
        self.interval_s = lease_seconds / BEATS_PER_LEASE
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._beat, name=f"lease-{self.job_id}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> LeaseKeeper:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _beat(self) -> None:
        conn: psycopg.Connection | None = None
        try:
            while not self._stop.wait(self.interval_s):
                try:
                    if conn is None or conn.closed:
                        conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=10)
                    if jobs_repo.renew_lease(conn, job_id=self.job_id, owner=self.owner) == "lost":
                        return  # the worker learns it at its next batch boundary
                except psycopg.Error as exc:  # the next beat tries again on a new connection
                    log.warning(
                        "job %s: lease renewal failed (%s); retrying", self.job_id, type(exc).__name__
                    )
                    if conn is not None:
                        conn.close()
                    conn = None
        finally:
            if conn is not None:
                conn.close()

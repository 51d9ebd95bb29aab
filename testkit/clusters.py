"""Throwaway PostgreSQL clusters (and the local Ray a run may have started beside them)."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from catalog import embedded
from testkit.ports import free_port


@contextmanager
def local_cluster(data_dir: Path) -> Iterator[embedded.LocalCluster]:
    """A PostgreSQL cluster under ``data_dir`` on a free port, without fsync (its data is
    thrown away); destroyed at exit."""
    cluster = embedded.cluster_for(data_dir, port=free_port(), fsync=False)
    try:
        embedded.up(cluster)
        yield cluster
    finally:
        embedded.destroy(cluster)


@contextmanager
def throwaway_cluster(prefix: str) -> Iterator[tuple[embedded.LocalCluster, Path]]:
    """A temporary folder and a cluster in it; yields both. At exit local Ray is shut down
    first (its workers hold connections to the cluster), then the cluster and the folder go."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp, local_cluster(Path(tmp)) as cluster:
        try:
            yield cluster, Path(tmp)
        finally:
            stop_ray()


def stop_ray() -> None:
    """Shut down this process's Ray, if it ever started one (importing ray costs seconds)."""
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()

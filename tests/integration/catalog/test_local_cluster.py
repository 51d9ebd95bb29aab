from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from catalog import embedded
from testkit.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_db_up_down_status(tmp_path: Path) -> None:
    cluster = embedded.cluster_for(tmp_path, port=free_port(), fsync=False)
    try:
        assert not embedded.is_running(cluster)
        url = embedded.up(cluster)
        assert embedded.is_running(cluster)
        assert embedded.up(cluster) == url  # idempotent
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("ragline",)
        # TCP on loopback needs the password; the socket is trust-only.
        password = (cluster.home / "password").read_text().strip()
        tcp = f"postgresql://ragline:{password}@127.0.0.1:{cluster.port}/ragline"
        with psycopg.connect(tcp) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(f"postgresql://ragline:wrong@127.0.0.1:{cluster.port}/ragline").close()
        assert embedded.down(cluster) is True
        assert not embedded.is_running(cluster)
        assert embedded.down(cluster) is False
    finally:
        embedded.destroy(cluster)

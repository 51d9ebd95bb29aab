from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from catalog import documents as docs_repo
from catalog.principals import ensure_tenant
from core.records import Acl
from core.settings import Settings
from wiring import build_search_service

pytestmark = pytest.mark.integration


def test_a_notification_wakes_the_watcher_long_before_the_poll(db_url: str, tmp_path: Path, embedder) -> None:
    settings = Settings(data_dir=tmp_path, database_url=db_url, index={"poll_seconds": 60})
    with ConnectionPool(db_url, min_size=1, max_size=2, open=True) as pool:
        service, close = build_search_service(settings, pool, embedder, watch=True)
        try:
            time.sleep(0.5)  # the watcher is LISTENing
            start = service.state.view.position
            with psycopg.connect(db_url) as conn:
                ensure_tenant(conn, tenant_id="acme")
                doc = docs_repo.lock_for_write(
                    conn, tenant_id="acme", external_id="x", mime_type="text/plain"
                )
                conn.commit()
                docs_repo.set_acl(conn, tenant_id="acme", external_id="x", acl=Acl(("group:a",), False))
            deadline = time.monotonic() + 10
            while service.state.view.position == start and time.monotonic() < deadline:
                time.sleep(0.05)
            assert service.state.view.position > start  # caught up without a request, well before 60 s
            assert doc.doc_id > 0
        finally:
            close()

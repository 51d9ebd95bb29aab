from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from authz.api_keys import create_key
from core.settings import Settings


@pytest.fixture
def foundation_client(db_url: str, tmp_path) -> Iterator[TestClient]:  # type: ignore[no-untyped-def]
    """The API with only the foundation services (no models, no indexes)."""
    settings = Settings(data_dir=tmp_path, database_url=db_url)
    with TestClient(create_app(settings, hooks=[])) as client:
        yield client


def make_key(
    db_url: str, tenant: str, roles: list[str], principal: str | None = None, delegate: bool = False
) -> str:
    with psycopg.connect(db_url) as conn:
        return create_key(
            conn, tenant_id=tenant, roles=roles, principal_id=principal, can_delegate=delegate
        ).token

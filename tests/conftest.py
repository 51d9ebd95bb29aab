"""Session-wide fixtures: one throwaway PostgreSQL (or RAGLINE_DATABASE_URL), a clean
database for each test, and the shared-data location."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from testkit.ports import free_port

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Every app the tests build in this process skips the start-up heap freeze (a full collection
# of a heap that holds torch and the model, per app); ``ragline serve`` subprocesses keep it
# (testkit.server.server_env drops RAGLINE_* variables); test_foundation_api tests both settings.
os.environ.setdefault("RAGLINE_API__FREEZE_HEAP", "false")

# The suite's time report: every test's duration by bucket, the slowest, the total.
# How make test splits the suite over two workers (pytest-xdist): testkit/xdist_groups.py.
pytest_plugins = ["testkit.durations", "testkit.xdist_groups"]

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

# Tables a test may write; schema_migrations survives so migrations run once per session.
_DATA_TABLES = (
    "feedback, tenant_fusion, tenant_reranker, purge_state, deployment_secrets, connector_items,"
    " connector_state, schedules,"
    " embedding_migrations,"
    " document_texts,"
    " audit_log, index_aliases, index_versions, job_items, jobs, tombstones, chunk_embeddings, chunks,"
    " document_versions, documents, catalog_changes, api_keys, group_members, principals, tenants"
)


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A migrated catalog database for the whole session."""
    from catalog import embedded
    from catalog.db import apply_migrations

    url = os.environ.get("RAGLINE_DATABASE_URL")
    cluster = None
    if not url:
        data_dir = tmp_path_factory.mktemp("ragline-data")
        cluster = embedded.cluster_for(data_dir, port=free_port(), fsync=False)
        url = embedded.up(cluster)
    apply_migrations(url)
    yield url
    if cluster is not None:
        embedded.destroy(cluster)


def truncate_all(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {_DATA_TABLES} RESTART IDENTITY CASCADE")


@pytest.fixture
def db_url(pg_url: str) -> str:
    """The catalog URL, emptied before the test."""
    truncate_all(pg_url)
    return pg_url


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_url, autocommit=True) as c:
        yield c


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.skip("../shared/data is absent")
    return SHARED_DATA


@pytest.fixture(scope="session")
def embedder():
    """The real bundled embedding model, loaded once per session."""
    from index.embedder import load_embedder

    return load_embedder("bundled:all-MiniLM-L6-v2", device="cpu")


@pytest.fixture(scope="session")
def onnx_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir's ``models/`` folder shared by the tests that run the ONNX exports (the fp32
    export takes ~30 s and its int8 copy a few more, so each is made once per run). Under
    pytest-xdist the workers share one folder in the run's base temp folder: an export is
    published by an atomic rename and a concurrent twin is kept (index/onnx_export.py)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        models = tmp_path_factory.getbasetemp().parent / "onnx-data" / "models"
        models.mkdir(parents=True, exist_ok=True)
        return models
    models = tmp_path_factory.mktemp("onnx-data") / "models"
    models.mkdir()
    return models


@pytest.fixture(scope="session")
def embedding_export(onnx_models: Path) -> Path:
    """The bundled model's ONNX export, made once per run in ``onnx_models``: every
    ``ragline serve`` subprocess and CLI test finds it through ``share_models`` instead of
    exporting again (~20-30 s each). Tests of the export itself keep their own folders. A file
    lock makes a second worker wait for the first one's export instead of making its own."""
    from core.settings import DEFAULT_EMBEDDING_MODEL
    from index.embedder import resolve_model_path
    from index.onnx_export import ensure_export, onnx_cache_dir

    out_dir = onnx_cache_dir(onnx_models.parent, DEFAULT_EMBEDDING_MODEL)
    with (onnx_models.parent / "export.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ensure_export(resolve_model_path(DEFAULT_EMBEDDING_MODEL), out_dir)
    return onnx_models


@pytest.fixture(scope="session")
def ray_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One local Ray for the whole session (ray.init costs ~5 s and ~0.6 GiB)."""
    import ray

    from jobs.ray_runtime import ensure_ray

    ensure_ray(address=None, data_dir=tmp_path_factory.mktemp("ray-data"), num_cpus=2)
    yield
    ray.shutdown()


# The session fixtures that start PostgreSQL, load, train or export a model, or start Ray: a
# test that reaches one of them (directly or through another fixture) is an integration test
# and must say so, so ``make unit`` (``-m "not integration"``) starts none of them.
INTEGRATION_FIXTURES = frozenset(
    {
        "pg_url",
        "embedder",
        "ray_local",
        "onnx_models",
        "embedding_export",
        "trained",
        "model_variants_dir",
        "any_reranker",  # takes the trained reranker by name (getfixturevalue), out of the static closure
    }
)


def unmarked_integration(items: list[pytest.Item]) -> list[str]:
    """The ids of ``items`` that use an integration fixture without the ``integration`` mark."""
    return [
        item.nodeid
        for item in items
        if INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ()))
        and item.get_closest_marker("integration") is None
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Fail the run on an unmarked integration test: ``-m "not integration"`` (the quick unit
    run) would otherwise start PostgreSQL or load the model for it."""
    unmarked = unmarked_integration(items)
    if unmarked:
        files = sorted({nodeid.split("::", 1)[0] for nodeid in unmarked})
        raise pytest.UsageError(
            "tests that start PostgreSQL, Ray or the model lack the integration mark"
            f" (pytestmark = pytest.mark.integration): {', '.join(files)}"
        )

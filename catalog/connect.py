"""Where the catalog is: ``RAGLINE_DATABASE_URL`` when set, else the local cluster."""

from __future__ import annotations

from catalog import embedded
from core.settings import Settings


def local_cluster(settings: Settings) -> embedded.LocalCluster:
    return embedded.cluster_for(settings.data_dir, port=settings.pg_port, bin_dir=settings.pg_bin_dir)


def database_url(settings: Settings, *, start: bool = True) -> str:
    """The URL to connect to; starts the local cluster when ``start`` and no URL is configured."""
    if settings.database_url:
        return settings.database_url
    cluster = local_cluster(settings)
    if start:
        return embedded.up(cluster)
    return embedded.current(cluster).url


def migrated_url(settings: Settings) -> str:
    """``database_url`` (starting the local cluster if needed) with every migration applied."""
    from catalog.db import apply_migrations

    url = database_url(settings)
    apply_migrations(url)
    return url

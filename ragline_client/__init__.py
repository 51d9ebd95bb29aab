"""ragline's Python client: ``Client``/``AsyncClient`` on httpx, typed by the wire models the
server itself uses, and a connector kit for incremental sync. Depends on httpx, pydantic and
tenacity only; it never imports the server's packages."""

from ragline_client._flows import PushResult
from ragline_client.client import AsyncClient, Client
from ragline_client.connector import (
    Connector,
    FileDocument,
    Item,
    Linked,
    Listing,
    Syncer,
    SyncPlan,
)
from ragline_client.errors import RaglineError
from ragline_client.models import AclIn, DocumentIn, FiltersIn, JobOut, RetrieveOut
from ragline_client.retry import RetryPolicy
from ragline_client.sync_report import SyncReport

__all__ = [
    "AclIn",
    "AsyncClient",
    "Client",
    "Connector",
    "DocumentIn",
    "FileDocument",
    "FiltersIn",
    "Item",
    "JobOut",
    "Linked",
    "Listing",
    "PushResult",
    "RaglineError",
    "RetrieveOut",
    "RetryPolicy",
    "SyncPlan",
    "SyncReport",
    "Syncer",
]

__version__ = "0.1.0"

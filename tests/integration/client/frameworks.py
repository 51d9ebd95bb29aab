"""What the framework tests share: a small corpus with one document per ACL shape, pushed
through the client and indexed, and the import rule for the optional packages (skip where a
developer lacks them; in CI, where the dev extra installs them, a missing one fails)."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

from ragline_client import AclIn, Client, DocumentIn
from tests.integration.client.conftest import LiveServer

CORPUS = [
    DocumentIn(
        external_id="keys",
        title="Key rotation",
        text="# Operations\n\n## Rotating signing keys\n\nCreate a new key pair in the vault, publish the"
        " public key, then retire the old signing key after one day.",
        mime_type="text/markdown",
        metadata={"team": "infra", "score": "spoofed"},
        acl=AclIn(principals=["group:eng"]),
    ),
    DocumentIn(
        external_id="lunch",
        title="Lunch menu",
        text="Monday: soup. Tuesday: pasta with tomato sauce. Wednesday: fish and chips."
        " Keys to the canteen.",
        acl=AclIn(public=True),
    ),
    DocumentIn(
        external_id="salaries",
        title="Salary bands",
        text="Confidential salary bands for signing bonus and key staff retention.",
        acl=AclIn(principals=["user:hr-lead"]),
    ),
]


def require(module: str) -> ModuleType:
    """The optional package, or a skip; under CI (``CI`` set) a missing package fails."""
    if os.environ.get("CI"):
        return importlib.import_module(module)
    return pytest.importorskip(module)


def seed(server: LiveServer) -> None:
    """Index ``CORPUS`` in the server's tenant and put user:alice in group:eng."""
    with Client(server.url, server.key("ingest", "admin")) as admin:
        pushed = admin.push(CORPUS)
        for job_id in pushed.job_ids:
            assert admin.wait(job_id, timeout=120).state == "succeeded"
        admin.set_groups("user:alice", ["group:eng"])

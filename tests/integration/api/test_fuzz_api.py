"""API fuzzing: schemathesis generates requests for every operation of ``/openapi.json`` and
sends each, valid and invalid alike, with every role's key (ingest, query, admin, delegating
query). No answer may be a 5xx, every answer must match its documented status, headers and
schema, and the server must still be healthy afterwards. Bounded: a fixed number of examples per operation."""

from __future__ import annotations

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS, load_all_checks

from tests.integration.api.conftest import make_key, wait_job

pytestmark = pytest.mark.integration

EXAMPLES = 15  # per operation and mode (valid and invalid input); each sent with 4 keys


def _auth(t: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {t}"}


def test_fuzz_every_operation_with_every_role(full_client: TestClient, db_url: str) -> None:
    keys = {
        "ingest": make_key(db_url, "acme", ["ingest"]),
        "query": make_key(db_url, "acme", ["query"], principal="user:q"),
        "admin": make_key(db_url, "acme", ["admin"]),
        "delegate": make_key(db_url, "acme", ["query"], principal="service:portal", delegate=True),
    }
    doc = {"external_id": "seed", "text": "Seed document about pumps.", "acl": {"public": True}}
    job = full_client.post("/v1/documents", json={"documents": [doc]}, headers=_auth(keys["ingest"])).json()
    wait_job(full_client, keys["ingest"], job["job_id"])
    schema = schemathesis.openapi.from_dict(full_client.get("/openapi.json").json())
    load_all_checks()
    checks = [c for c in CHECKS.get_all() if c.__name__ not in _SKIPPED_CHECKS]
    seen: dict[str, int] = {}
    server_errors: list[str] = []
    operations = [(r.ok(), mode) for r in schema.get_all_operations() for mode in GenerationMode]
    for operation, mode in operations:

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def fuzz(case) -> None:  # type: ignore[no-untyped-def]
            label = case.operation.label
            for role, token in keys.items():
                kwargs = case.as_transport_kwargs(base_url="http://testserver", headers=_auth(token))
                kwargs = _multipart_safe({k: v for k, v in kwargs.items() if k in _REQUEST_ARGS})
                response = full_client.request(**kwargs)
                seen[label] = seen.get(label, 0) + 1
                if response.status_code >= 500:
                    server_errors.append(f"{role} {label}: {response.status_code} {response.text[:200]}")
                response.request.read()  # a multipart body streams; schemathesis reads it back
                case.validate_response(response, checks=checks, headers=kwargs.get("headers"))

        try:
            fuzz()
        except Unsatisfiable:  # nothing to make invalid (no parameters, no body)
            assert mode is GenerationMode.NEGATIVE, operation.label
    assert not server_errors, server_errors
    assert len(seen) == len(list(schema.get_all_operations()))  # every operation was sent
    print(f"fuzzed {sum(seen.values())} requests over {len(seen)} operations")
    assert full_client.get("/readyz").status_code == 200
    after = full_client.post("/v1/retrieve", json={"query": "pumps"}, headers=_auth(keys["query"]))
    assert after.status_code == 200 and after.json()["results"]


def _bytes(value: object) -> object:
    if isinstance(value, tuple):
        return (value[0], _bytes(value[1]), *value[2:])
    if isinstance(value, bytes | str):
        return value
    return repr(value)


def _multipart_safe(kwargs: dict) -> dict:
    """Multipart parts as the HTTP client takes them (schemathesis may generate ints)."""
    files = kwargs.get("files")
    if files:
        items = files.items() if isinstance(files, dict) else files
        kwargs["files"] = [(name, _bytes(value)) for name, value in items]
    if isinstance(kwargs.get("data"), dict):
        kwargs["data"] = {k: v if isinstance(v, str) else repr(v) for k, v in kwargs["data"].items()}
    return kwargs


_REQUEST_ARGS = {"method", "url", "headers", "params", "json", "data", "files", "cookies", "content"}
# Checks that judge behaviour the schema cannot express: values the schema allows that the
# server's stricter rules (NUL characters, principal syntax, unknown ids) reject with a
# documented 4xx, and stateful links this schema does not declare.
_SKIPPED_CHECKS = {
    "positive_data_acceptance",
    "use_after_free",
    "ensure_resource_availability",
    # Invalid cases still carry a valid key (added here) and unknown query parameters are
    # ignored, as HTTP APIs do: "invalid request accepted" would flag exactly those.
    "negative_data_rejection",
    # These send probes of their own over the network; test_permission_attacks.py covers auth.
    "ignored_auth",
    "object_level_authorization",
}

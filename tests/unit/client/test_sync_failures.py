"""Which job failures the connector kit remembers (the content decides: an encrypted or
corrupt file fails the same way every run) and which it retries every run (the load, the
server's set-up, another writer decides), and the form a remembered failure takes in the
connector's state."""

from __future__ import annotations

import re
from pathlib import Path

from ragline_client.failures import PERMANENT_CODES, RETRIED_CODES, Remembered, is_permanent, remembered_value

REPO = Path(__file__).resolve().parents[3]
# Where the server names a failed item's reason: ParseError(..., code="..."), a module's
# ``*_CODE = "..."`` constant, ``Failed(ref, "...", ...)``.
_CODES = re.compile(r'code="([a-z_]+)"|_CODE = "([a-z_]+)"|Failed\([^,()]+, "([a-z_]+)"')


def _server_codes() -> set[str]:
    files = [*REPO.glob("ingest/*.py"), *REPO.glob("jobs/*.py"), REPO / "catalog" / "documents.py"]
    return {c for f in files for m in _CODES.finditer(f.read_text()) for c in m.groups() if c}


def test_every_reason_a_job_can_fail_an_item_for_is_classified() -> None:
    codes = _server_codes()
    assert {"encrypted_document", "parse_timeout", "internal_error", "owned_by_other_connector"} <= codes
    assert not PERMANENT_CODES & RETRIED_CODES
    unclassified = codes - PERMANENT_CODES - RETRIED_CODES
    assert not unclassified, f"say whether these fail the same content again: {sorted(unclassified)}"


def test_only_a_failure_of_the_content_is_remembered() -> None:
    recorded = "sha256:ab12|acl:9f"
    for code in ("parse_timeout", "parse_crashed", "ocr_unavailable", "internal_error", "a_new_code", None):
        assert not is_permanent(code)
        assert remembered_value(recorded, code, None) is None  # retried every run
    value = remembered_value(recorded, "encrypted_document", None)
    assert value is not None
    failure = Remembered.decode(value)
    assert failure is not None and (failure.recorded, failure.code) == (recorded, "encrypted_document")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", failure.since)
    # Connectors that read their state (git, SQL) still find the fingerprint where it was.
    assert value.split("|acl:")[0] == "sha256:ab12"
    assert Remembered.decode(recorded) is None and Remembered.decode(None) is None


def test_a_failure_keeps_its_first_date_while_the_content_is_the_same() -> None:
    first = Remembered("sha256:ab12|acl:9f", "corrupt_pdf", "2026-01-05T09:12:03Z")
    again = Remembered.decode(remembered_value(first.recorded, "corrupt_pdf", first))
    assert again == first
    changed = Remembered.decode(remembered_value("sha256:cd34|acl:9f", "corrupt_pdf", first))
    assert changed is not None and changed.since != first.since
    # The state holds 512 characters an item: a longer value is not remembered (retried as before).
    assert remembered_value("x" * 500, "corrupt_pdf", None) is None

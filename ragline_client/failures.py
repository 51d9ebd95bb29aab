"""Which failures of a synced item are worth retrying, and how the connector kit remembers
the ones that are not.

A job fails an item with a reason code. Some codes are decided by the bytes alone (an
encrypted workbook, a corrupt PDF, a type no parser reads): the same content fails the same
way on every run, so sending it again costs a parse and turns every run's exit code to 3
for nothing. ``Syncer`` remembers such an item in the connector's state under its
fingerprint (``Remembered``) and does not send it again while the fingerprint is unchanged;
a new fingerprint (the file was fixed) or ``Syncer(retry_failed=True)`` (the server was
upgraded, a limit raised) tries it again. Every other code (a timeout, a crashed or
missing parser, OCR switched off, a document another connector holds, anything unknown) is
retried on every run, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

# The content decides: the same bytes fail the same way on every run of this server.
PERMANENT_CODES = frozenset(
    {
        "encrypted_document",
        "encrypted_pdf",
        "corrupt_document",
        "corrupt_pdf",
        "unsupported_type",
        "mislabelled_content",
        "unsafe_xml",
        "zip_bomb",
        "mime_too_complex",
        "too_many_cells",
        "too_many_slides",
        "too_many_chunks",
        "image_too_large",
        "image_only_pdf",
        "empty_document",
        "binary_content",
        # A parser raised on this content where it has no reason code: deterministic for
        # these bytes until the server changes (then: retry_failed).
        "parse_failed",
    }
)
# The load, the server's set-up or another writer decides: retried on every run.
RETRIED_CODES = frozenset(
    {
        "parse_timeout",  # a busy machine
        "parse_crashed",  # a worker killed (the OOM killer, a restart)
        "parse_memory_limit",  # the ceiling is a setting, and memory use varies with the batch
        "ocr_timeout",
        "ocr_failed",
        "ocr_disabled",  # settings an operator changes
        "ocr_unavailable",
        "parser_unavailable",  # a missing optional package
        "owned_by_other_connector",  # the other connector may delete it
        "not_owned_by_connector",
        "source_unreadable",  # path ingests: the file's permissions
        "outside_source",
        "internal_error",  # a bug: the fix should reach every item it hit
    }
)

_MARK = "|failed:"
# The longest value a connector's state holds per item (``models.Fingerprint``).
STATE_VALUE_MAX = 512


def is_permanent(code: str | None) -> bool:
    """True when ``code`` fails the same content again on every run (unknown codes: False)."""
    return code in PERMANENT_CODES


@dataclass(frozen=True, slots=True)
class Remembered:
    """An item whose content failed for good: ``recorded`` is what the kit would record had
    it been ingested (fingerprint and ACL), ``code`` the job's reason, ``since`` when it
    first failed with this content (UTC, ISO 8601)."""

    recorded: str
    code: str
    since: str

    def encode(self) -> str:
        """The state's value: the recorded form first, so connectors that read their state
        (``split("|acl:")[0]``: the fingerprint) read a remembered item's as any other's."""
        return f"{self.recorded}{_MARK}{self.code}@{self.since}"

    @classmethod
    def decode(cls, value: str | None) -> Remembered | None:
        """The remembered failure a state value holds, or None for an ingested item."""
        if value is None or _MARK not in value:
            return None
        recorded, _, tail = value.rpartition(_MARK)
        code, _, since = tail.partition("@")
        return cls(recorded, code, since)

    @classmethod
    def now(cls, recorded: str, code: str) -> Remembered:
        return cls(recorded, code, datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))


def remembered_value(recorded: str, code: str | None, before: Remembered | None) -> str | None:
    """The state value that remembers an item the job failed with ``code``, or None when it
    is not to be remembered: a code worth retrying, or a value too long for the state.
    ``before`` is the item's earlier failure: its ``since`` stays while the content does."""
    if code is None or not is_permanent(code):
        return None
    kept = before is not None and before.recorded == recorded
    failure = Remembered(recorded, code, before.since) if before and kept else Remembered.now(recorded, code)
    value = failure.encode()
    return value if len(value) <= STATE_VALUE_MAX else None

"""Rules for identifiers and text that reach the catalog, shared by every entry point: the
wire models (this package, which the server imports), the server's CLI and jobs
(core/validation.py wraps these with ragline's error type). Standard library only.

Every pattern is matched with ``fullmatch``: ``re.match`` with ``$`` accepts a trailing
newline, which would make ``user:alice\\n`` a second principal. PostgreSQL text cannot hold
NUL, so every string bound for it is checked here, at the edge, and a bad one is a 422 for
that item instead of a 500 for the batch.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time


class RuleError(ValueError):
    """A value breaks one of the rules (pydantic reports it as a validation error)."""


# An ACL entry names who may read: a user, a group or a service account.
ACL_PRINCIPAL = re.compile(r"(user|group|service):[^\s\x00-\x1f\x7f]{1,200}")
GROUP_ID = re.compile(r"group:[^\s\x00-\x1f\x7f]{1,200}")
# The principal an API key (or a delegated query) acts as.
PRINCIPAL_ID = re.compile(r"(user|service):[A-Za-z0-9_.@+-]{1,200}")
METADATA_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
# External ids may hold '/', spaces and unicode, but no control characters.
EXTERNAL_ID = re.compile(r"[^\x00-\x1f\x7f]{1,512}")
# The dates a filter may name: one day inside datetime's range, so a time-zone shift
# cannot overflow it (``0001-01-01`` in a zone east of UTC is year 0).
MIN_DATE = date(1, 1, 2)
MAX_DATE = date(9999, 12, 30)


def acl_principal(value: str) -> str:
    """``value`` if it is a valid ACL entry, else :class:`RuleError` naming it."""
    if not ACL_PRINCIPAL.fullmatch(value):
        raise RuleError(
            f"ACL entry {value!r} must look like user:<id>, group:<id> or service:<id>"
            " (no spaces or control characters)"
        )
    return value


def group_id(value: str) -> str:
    if not GROUP_ID.fullmatch(value):
        raise RuleError(
            f"group {value!r} must look like group:<id> (1-200 characters, no spaces or control characters)"
        )
    return value


def principal_id(value: str) -> str:
    if not PRINCIPAL_ID.fullmatch(value):
        raise RuleError(f"principal must look like user:<id> or service:<id>, got {value!r}")
    return value


def external_id(value: str) -> str:
    if not EXTERNAL_ID.fullmatch(value):
        raise RuleError(f"external id {value!r} must be 1-512 characters without control characters")
    return value


def no_nul(value: str, what: str = "text") -> str:
    """``value`` unless it holds a NUL character, which PostgreSQL text cannot store."""
    if "\x00" in value:
        raise RuleError(f"{what} contains a NUL character")
    return value


def filter_instant(value: datetime | date) -> datetime:
    """A date filter as an aware datetime, rejecting dates a time-zone shift would overflow."""
    day = value.date() if isinstance(value, datetime) else value
    if not MIN_DATE <= day <= MAX_DATE:
        raise RuleError(f"date {value.isoformat()} must lie between {MIN_DATE} and {MAX_DATE}")
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.combine(value, time.min, tzinfo=UTC)


def metadata_pair(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` split once, with a valid key."""
    key, sep, value = text.partition("=")
    if not sep:
        raise RuleError(f"metadata {text!r} must be KEY=VALUE")
    if not METADATA_KEY.fullmatch(key):
        raise RuleError(f"metadata key {key!r} must match {METADATA_KEY.pattern}")
    no_nul(value, f"metadata value of {key!r}")
    return key, value

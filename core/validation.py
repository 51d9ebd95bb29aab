"""Rules for identifiers that decide access, shared by every entry point (API, CLI, jobs).

Every pattern is matched with ``fullmatch``: ``re.match`` with ``$`` accepts a trailing
newline, which would make ``user:alice\\n`` a second principal.
"""

from __future__ import annotations

import re

from core.errors import InvalidInputError

# An ACL entry names who may read: a user, a group or a service account.
ACL_PRINCIPAL = re.compile(r"(user|group|service):[^\s\x00]{1,200}")
METADATA_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


def acl_principal(value: str) -> str:
    """``value`` if it is a valid ACL entry, else :class:`InvalidInputError` naming it."""
    if not ACL_PRINCIPAL.fullmatch(value):
        raise InvalidInputError(
            f"ACL entry {value!r} must look like user:<id>, group:<id> or service:<id> (no spaces)"
        )
    return value


def metadata_pair(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` split once, with a valid key."""
    key, sep, value = text.partition("=")
    if not sep:
        raise InvalidInputError(f"metadata {text!r} must be KEY=VALUE")
    if not METADATA_KEY.fullmatch(key):
        raise InvalidInputError(f"metadata key {key!r} must match {METADATA_KEY.pattern}")
    if "\x00" in value:
        raise InvalidInputError(f"metadata value of {key!r} contains a NUL character")
    return key, value

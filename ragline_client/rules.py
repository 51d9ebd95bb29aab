"""Rules for identifiers and text that reach the catalog, shared by every entry point: the
wire models (this package, which the server imports), the server's CLI and jobs
(core/validation.py wraps these with ragline's error type). Standard library only.

Every pattern is matched with ``fullmatch``: ``re.match`` with ``$`` accepts a trailing
newline, which would make ``user:alice\\n`` a second principal. PostgreSQL text cannot hold
NUL, so every string bound for it is checked here, at the edge, and a bad one is a 422 for
that item instead of a 500 for the batch. The same goes for text that is not Unicode at all
(a lone UTF-16 surrogate, which JSON's ``\\ud800`` escape can carry but UTF-8 cannot encode)
and for numbers JSON cannot hold (``NaN``, ``Infinity``, ``1e999``, which Python's parser
accepts): ``check_value`` refuses both anywhere in a value, and ``parse_json`` refuses them
while parsing a JSON form field.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from datetime import UTC, date, datetime, time


class RuleError(ValueError):
    """A value breaks one of the rules (pydantic reports it as a validation error)."""


# An ACL entry names who may read: a user, a group or a service account.
ACL_PRINCIPAL = re.compile(r"(user|group|service):[^\s\x00-\x1f\x7f-\x9f]{1,200}")
GROUP_ID = re.compile(r"group:[^\s\x00-\x1f\x7f-\x9f]{1,200}")
# The principal an API key (or a delegated query) acts as.
PRINCIPAL_ID = re.compile(r"(user|service):[A-Za-z0-9_.@+-]{1,200}")
# An identity provider's user: ``user:<issuer namespace>:<subject>``. The ':' keeps it apart
# from every key principal (PRINCIPAL_ID has none), and the namespace from other issuers'.
TOKEN_PRINCIPAL_ID = re.compile(r"user:[a-z0-9][a-z0-9-]{0,31}:[A-Za-z0-9_.@+-]{1,200}")
METADATA_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
# External ids may hold '/', spaces and unicode, but no control characters.
EXTERNAL_ID = re.compile(r"[^\x00-\x1f\x7f-\x9f]{1,512}")
# Control characters, Unicode's category Cc: C0 (U+0000-U+001F), DEL and C1 (U+0080-U+009F).
# No terminal, browser or PDF shows them, and most strip them: a title or label holding one
# reads differently in every place it appears, so the edge refuses them instead.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# The same less tab, line feed and carriage return, which free-form values may hold.
_CONTROL_IN_TEXT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
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
    return unicode_text(value, "ACL entry")


def group_id(value: str) -> str:
    if not GROUP_ID.fullmatch(value):
        raise RuleError(
            f"group {value!r} must look like group:<id> (1-200 characters, no spaces or control characters)"
        )
    return unicode_text(value, "group")


def principal_id(value: str) -> str:
    """A key's principal or an identity provider's user (groups, delegation, search-as)."""
    if not (PRINCIPAL_ID.fullmatch(value) or TOKEN_PRINCIPAL_ID.fullmatch(value)):
        raise RuleError(
            f"principal must look like user:<id>, service:<id> or user:<issuer>:<id>, got {value!r}"
        )
    return value


def key_principal_id(value: str) -> str:
    """The principal an API key may act as: never an identity provider's user."""
    if not PRINCIPAL_ID.fullmatch(value):
        raise RuleError(f"a key's principal must look like user:<id> or service:<id>, got {value!r}")
    return value


def external_id(value: str) -> str:
    if not EXTERNAL_ID.fullmatch(value):
        no_control(value, "external id")
        raise RuleError(f"external id must be 1-512 characters, got {len(value)}")
    # A file name that is not UTF-8 reaches Python (argv, os.walk) as lone surrogates.
    return unicode_text(value, "external id")


def no_control(value: str, what: str = "text") -> str:
    """``value`` if it holds no control character (C0, DEL, C1: :data:`_CONTROL`) and is
    Unicode text: a single-line label such as a title or an external id."""
    return _refuse(_CONTROL, value, what)


def no_control_in_text(value: str, what: str = "text") -> str:
    """``value`` if it holds no control character other than tab, line feed and carriage
    return, and is Unicode text: a free-form value such as a metadata value."""
    return _refuse(_CONTROL_IN_TEXT, value, what)


def as_label(text: str) -> str:
    """Foreign text (a mail subject, an attachment's file name) made a valid label: each run
    of control characters and whitespace becomes one space. For connectors that derive a
    title from a source's content; a title a caller gives is refused instead (``no_control``)."""
    return " ".join(_CONTROL.sub(" ", text).split())


def _refuse(pattern: re.Pattern[str], value: str, what: str) -> str:
    found = pattern.search(value)
    if found:
        raise RuleError(
            f"{what} contains the control character U+{ord(found.group()):04X} at character"
            f" {found.start()}; control characters are refused, not removed"
        )
    return unicode_text(value, what)


def no_nul(value: str, what: str = "text") -> str:
    """``value`` unless it holds a NUL character, which PostgreSQL text cannot store, or is
    not Unicode text (``unicode_text``)."""
    if "\x00" in value:
        raise RuleError(f"{what} contains a NUL character")
    return unicode_text(value, what)


# A code point in U+D800..U+DFFF in a Python str is half of a UTF-16 pair on its own:
# ``json.loads('"\\ud800"')`` makes one, and nothing downstream can encode it.
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def unicode_text(value: str, what: str = "text") -> str:
    """``value`` if it is Unicode text (UTF-8 can encode it), else :class:`RuleError`."""
    found = _SURROGATE.search(value)
    if found:
        raise RuleError(
            f"{what} contains a lone UTF-16 surrogate (U+{ord(found.group()):04X}) at character"
            f" {found.start()}: not valid Unicode text"
        )
    return value


def check_value(value: object, what: str = "value", *, allow_nul: bool = False) -> object:
    """``value`` unchanged if every string in it (dict keys included) is Unicode text, without
    NUL unless ``allow_nul``, and every float is finite; else :class:`RuleError` naming the
    place, e.g. ``metadata['k']``. Iterative, so no nesting depth can overflow the stack."""
    for place, item in _leaves(value, what):
        if isinstance(item, str):
            unicode_text(item, place)
            if not allow_nul:
                no_nul(item, place)
        elif isinstance(item, float) and not math.isfinite(item):
            raise RuleError(f"{place} is {item!r}: numbers must be finite (JSON has no NaN or Infinity)")
    return value


def _leaves(value: object, what: str) -> Iterator[tuple[str, object]]:
    stack: list[tuple[str, object]] = [(what, value)]
    while stack:
        place, item = stack.pop()
        if isinstance(item, dict):
            for key, inner in item.items():
                yield f"{place} key", key
                stack.append((f"{place}[{echo(key) if isinstance(key, str) else key!r}]", inner))
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend((f"{place}[{i}]", inner) for i, inner in enumerate(item))
        else:
            yield place, item


def echo(value: str) -> str:
    """``value`` safe to send back in an answer or a log line: a lone surrogate (which no
    encoder can write) becomes its ``\\udXXX`` escape; anything else is unchanged."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8") if _SURROGATE.search(value) else value


# Deeper than anything a metadata map or an ACL needs, far below the parser's recursion limit.
MAX_JSON_DEPTH = 32


def parse_json(text: str, what: str) -> object:
    """A JSON form field parsed as JSON allows: no ``NaN``/``Infinity`` (nor a number such as
    ``1e999`` that overflows to one), nesting at most ``MAX_JSON_DEPTH`` deep, and text that
    is Unicode. Any failure is :class:`RuleError` naming ``what``."""

    def constant(name: str) -> object:
        raise RuleError(f"{what}: {name} is not a JSON number (numbers must be finite)")

    def finite(number: str) -> float:
        parsed = float(number)
        if not math.isfinite(parsed):
            raise RuleError(f"{what}: {number[:40]} is out of range (numbers must be finite)")
        return parsed

    try:
        value = json.loads(text, parse_constant=constant, parse_float=finite)
    except RecursionError:
        raise RuleError(f"{what} nests too deeply (at most {MAX_JSON_DEPTH} levels)") from None
    except json.JSONDecodeError as exc:
        raise RuleError(f"{what} is not valid JSON: {exc.msg} at character {exc.pos}") from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise RuleError(f"{what} nests too deeply (at most {MAX_JSON_DEPTH} levels)")
    check_value(value, what)
    return value


def _depth(value: object) -> int:
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth + 1)
            stack.extend((inner, depth + 1) for inner in (item.values() if isinstance(item, dict) else item))
    return deepest


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
    no_control_in_text(value, f"metadata value of {key!r}")
    return key, value

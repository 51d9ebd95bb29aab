"""The identifier and text rules of every entry point, raising :class:`InvalidInputError`.

The rules themselves live in ``ragline_client.rules`` (standard library only), because the
wire models that apply them at the API's edge are the client's; the CLI and jobs call them
through these wrappers so a bad value is a clear 4xx or exit 2, never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime
from typing import TypeVar

from core.errors import InvalidInputError
from ragline_client import rules
from ragline_client.rules import (
    ACL_PRINCIPAL,
    EXTERNAL_ID,
    GROUP_ID,
    MAX_DATE,
    METADATA_KEY,
    MIN_DATE,
    PRINCIPAL_ID,
)

__all__ = [
    "ACL_PRINCIPAL",
    "EXTERNAL_ID",
    "GROUP_ID",
    "MAX_DATE",
    "METADATA_KEY",
    "MIN_DATE",
    "PRINCIPAL_ID",
    "acl_principal",
    "echo",
    "external_id",
    "filter_instant",
    "group_id",
    "key_principal_id",
    "metadata_pair",
    "no_nul",
    "parse_json",
    "principal_id",
]

T = TypeVar("T")


def _checked(call: Callable[[], T]) -> T:
    try:
        return call()
    except rules.RuleError as exc:
        raise InvalidInputError(str(exc)) from None


def acl_principal(value: str) -> str:
    return _checked(lambda: rules.acl_principal(value))


def group_id(value: str) -> str:
    return _checked(lambda: rules.group_id(value))


def principal_id(value: str) -> str:
    return _checked(lambda: rules.principal_id(value))


def key_principal_id(value: str) -> str:
    return _checked(lambda: rules.key_principal_id(value))


def external_id(value: str) -> str:
    return _checked(lambda: rules.external_id(value))


def no_nul(value: str, what: str = "text") -> str:
    return _checked(lambda: rules.no_nul(value, what))


def parse_json(text: str, what: str) -> object:
    """A JSON form field: finite numbers, bounded nesting, Unicode text (``rules.parse_json``)."""
    return _checked(lambda: rules.parse_json(text, what))


# Text safe to send back or log, whatever the client sent (a lone surrogate is escaped).
echo = rules.echo


def filter_instant(value: datetime | date) -> datetime:
    return _checked(lambda: rules.filter_instant(value))


def metadata_pair(text: str) -> tuple[str, str]:
    return _checked(lambda: rules.metadata_pair(text))

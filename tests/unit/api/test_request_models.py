"""Every request body of every route, walked: strict scalars, finite floats, and every model
a ``Strict`` (whose field validator refuses lone surrogates, NUL and non-finite numbers).

A new route or field that takes ``bool``, ``int`` or ``float`` laxly ("yes", 1, "5" taken
as true or 5) fails here, as ``can_delegate``, ``top_k``, ``rerank`` and ``force`` did.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from pydantic import BaseModel, ValidationError

from api.app import create_app
from api.schemas import DocumentIn, FiltersIn, PushRequest, Strict
from core.settings import Settings
from ragline_client import rules

# Bodies FastAPI builds itself from form fields; the route validates them as a DocumentIn.
FORM_ROUTES = {"/v1/documents:upload"}
# Models a route validates item by item (a push's documents), out of the body's schema.
PER_ITEM_MODELS = {PushRequest: DocumentIn}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    settings = Settings(data_dir=tmp_path_factory.mktemp("d"), database_url="postgresql://unused/none")
    return create_app(settings, hooks=[])  # no lifespan: nothing connects


def _bodies(app: FastAPI) -> Iterator[tuple[str | None, type[BaseModel]]]:
    for route in iter_route_contexts(app.routes):
        field = getattr(route, "body_field", None)
        if field is None or route.path in FORM_ROUTES:
            continue
        model = field.field_info.annotation
        yield route.path, model
        if model in PER_ITEM_MODELS:
            yield route.path, PER_ITEM_MODELS[model]


def _scalars(schema: Any, config: dict[str, Any], where: str) -> Iterator[tuple[str, dict, dict]]:
    """Every bool/int/float schema under ``schema`` with its model's config; models too."""
    if isinstance(schema, list):
        for item in schema:
            yield from _scalars(item, config, where)
        return
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if kind == "model":
        config = schema.get("config", {})
        where = schema["cls"].__name__
        yield where, schema, config
    if kind in ("bool", "int", "float"):
        yield where, schema, config
    for key, value in schema.items():
        if key not in ("cls", "config", "metadata", "function", "ref", "serialization"):
            yield from _scalars(value, config, where)


def test_every_request_body_is_strict(app: FastAPI) -> None:
    bodies = list(_bodies(app))
    assert {path for path, _ in bodies} >= {"/v1/documents", "/v1/admin/keys", "/v1/retrieve"}
    lax: list[str] = []
    for path, model in bodies:
        for where, schema, config in _scalars(model.__pydantic_core_schema__, {}, model.__name__):
            kind = schema["type"]
            if kind == "model" and not issubclass(schema["cls"], Strict):
                lax.append(f"{path}: {where} is not a Strict model")
            if kind in ("bool", "int", "float") and not schema.get("strict"):
                lax.append(f"{path}: a {kind} in {where} is not strict")
            if kind == "float" and schema.get("allow_inf_nan", config.get("allow_inf_nan", True)):
                lax.append(f"{path}: a float in {where} allows NaN/Infinity")
    assert not lax, lax


def test_the_upload_form_is_checked_as_a_document(app: FastAPI) -> None:
    [upload] = [r for r in iter_route_contexts(app.routes) if r.path in FORM_ROUTES]
    form = upload.body_field.field_info.annotation
    fields = set(form.model_fields) - {"file", "mime_type"}
    assert fields <= set(DocumentIn.model_fields), fields  # each one goes through DocumentIn


@pytest.mark.parametrize(
    ("model", "data", "field"),
    [
        (DocumentIn, {"external_id": "a", "text": "t", "title": "x\ud800"}, "title"),
        (DocumentIn, {"external_id": "a", "text": "t", "metadata": {"k": math.nan}}, "metadata"),
        (DocumentIn, {"external_id": "a", "text": "t", "metadata": {"k": math.inf}}, "metadata"),
        (DocumentIn, {"external_id": "a", "text": "t", "acl": {"public": 1}}, "public"),
        (DocumentIn, {"external_id": "a", "text": "t", "acl": {"principals": ["user:\ud800"]}}, "principals"),
    ],
)
def test_strict_models_refuse_and_name_the_field(model: type[BaseModel], data: dict, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    assert field in str(caught.value.errors()[0]["loc"])


def test_a_documents_text_may_hold_nul_but_not_a_surrogate() -> None:
    assert DocumentIn.model_validate({"external_id": "a", "text": "a\x00b"}).text == "a\x00b"
    with pytest.raises(ValidationError):
        DocumentIn.model_validate({"external_id": "a", "text": "a\ud800"})


def test_check_value_walks_keys_lists_and_floats() -> None:
    assert rules.check_value({"a": [1, 2.5, "x", {"b": None}]}, "m") == {"a": [1, 2.5, "x", {"b": None}]}
    for bad, place in (
        ({"a": [1, math.nan]}, "m['a'][1]"),
        ({"a\ud800": 1}, "m key"),
        ({"a": {"b": "c\x00"}}, "m['a']['b']"),
        ([-math.inf], "m[0]"),
    ):
        with pytest.raises(rules.RuleError, match=place.replace("[", r"\[").replace("]", r"\]")):
            rules.check_value(bad, "m")
    deep: list[Any] = []
    for _ in range(100_000):  # iterative: no nesting depth overflows the stack
        deep = [deep]
    assert rules.check_value(deep, "m") is deep


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"k": NaN}', "NaN is not a JSON number"),
        ('{"k": -Infinity}', "-Infinity is not a JSON number"),
        ('{"k": 1e999}', "1e999 is out of range"),
        ("[" * 50_000 + "]" * 50_000, "nests too deeply"),
        ("[" * 40 + "]" * 40, "nests too deeply"),
        ('{"k": "\\ud800"}', "lone UTF-16 surrogate"),
        ("{", "not valid JSON"),
    ],
)
def test_parse_json_refuses_what_json_cannot_hold(text: str, message: str) -> None:
    with pytest.raises(rules.RuleError, match=message):
        rules.parse_json(text, "metadata")


def test_parse_json_takes_ordinary_json() -> None:
    assert rules.parse_json('{"a": [1, 2.5, "x\\u00e9"], "b": {"c": null}}', "m") == {
        "a": [1, 2.5, "xé"],
        "b": {"c": None},
    }


def test_echo_makes_any_text_writable() -> None:
    assert rules.echo("a\ud800b") == "a\\ud800b"
    assert rules.echo("plain é") == "plain é"
    assert rules.echo("a\ud800b").encode("utf-8") == b"a\\ud800b"


@pytest.mark.parametrize(
    ("rule", "value"),
    [
        (rules.external_id, "caf\udce9.txt"),  # a Latin-1 file name, as os.walk hands it over
        (rules.acl_principal, "user:a\ud800"),
        (rules.group_id, "group:\udfff"),
        (rules.no_nul, "text\ud800"),
        (rules.metadata_pair, "team=s\udcffre"),
    ],
)
def test_every_identifier_rule_refuses_a_lone_surrogate(rule, value: str) -> None:
    """What the CLI and jobs check too (core/validation.py wraps these), not only the API."""
    with pytest.raises(rules.RuleError, match="surrogate"):
        rule(value)


# One of each class of control character (Unicode category Cc): C0 below tab, tab, line feed,
# carriage return, C0 above them (escape, unit separator), DEL and C1 (NEL, CSI, APC).
CONTROLS = ["\x01", "\t", "\n", "\r", "\x1b", "\x1f", "\x7f", "\x85", "\x9b", "\x9f"]
LINE_BREAKS = {"\t", "\n", "\r"}


@pytest.mark.parametrize("char", CONTROLS, ids=[f"U+{ord(c):04X}" for c in CONTROLS])
def test_a_control_character_in_a_title_or_external_id_is_refused_by_name(char: str) -> None:
    for field, data in (
        ("title", {"external_id": "a", "text": "t", "title": f"Ti{char}tle"}),
        ("external_id", {"external_id": f"a{char}b", "text": "t"}),
    ):
        with pytest.raises(ValidationError) as caught:
            DocumentIn.model_validate(data)
        [error] = caught.value.errors()
        assert field in error["loc"], error
        assert f"U+{ord(char):04X}" in error["msg"], error


@pytest.mark.parametrize("char", CONTROLS, ids=[f"U+{ord(c):04X}" for c in CONTROLS])
def test_free_text_values_take_line_breaks_and_refuse_other_controls(char: str) -> None:
    """Metadata and filter values are free text: tab, line feed and carriage return are kept
    as sent; every other control character is refused, never removed."""
    value = f"v{char}w"
    cases = (
        (DocumentIn, {"external_id": "a", "text": "t", "metadata": {"k": value}}, "metadata"),
        (FiltersIn, {"metadata": {"k": value}}, "metadata"),
        (FiltersIn, {"metadata": {"k": ["x", value]}}, "metadata"),
    )
    for model, data, field in cases:
        if char in LINE_BREAKS:
            assert model.model_validate(data).model_dump()["metadata"] == data["metadata"]
            continue
        with pytest.raises(ValidationError) as caught:
            model.model_validate(data)
        assert any(field in e["loc"] for e in caught.value.errors()), caught.value.errors()
    acl = {"external_id": "a", "text": "t", "acl": {"principals": [f"user:a{char}"]}}
    with pytest.raises(ValidationError):
        DocumentIn.model_validate(acl)


def test_a_connector_makes_a_label_of_foreign_text() -> None:
    assert rules.as_label("Re:\x01 quarterly\r\n\t report\x85") == "Re: quarterly report"
    assert DocumentIn.model_validate({"external_id": "a", "text": "t", "title": rules.as_label("a\x9bb")})

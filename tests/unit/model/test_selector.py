"""model/selector: the one Requirement every selector matches with, and the shared helpers."""

from __future__ import annotations

import pytest

from gpusched.model.selector import (
    EVERYTHING,
    NOTHING,
    LabelSelector,
    Requirement,
    as_list,
    as_map,
    freeze,
    label_key_error,
    label_value_error,
    parse_int64,
)


@pytest.mark.parametrize(
    ("req", "labels", "want"),
    [
        (Requirement("k", "In", frozenset({"a", "b"})), {"k": "b"}, True),
        (Requirement("k", "In", frozenset({"a"})), {}, False),
        (Requirement("k", "NotIn", frozenset({"a"})), {}, True),
        (Requirement("k", "NotIn", frozenset({"a"})), {"k": "a"}, False),
        (Requirement("k", "Exists"), {"k": ""}, True),
        (Requirement("k", "DoesNotExist"), {"k": ""}, False),
        (Requirement("k", "Gt", frozenset({"5"})), {"k": "6"}, True),
        (Requirement("k", "Gt", frozenset({"5"})), {"k": "5"}, False),
        (Requirement("k", "Lt", frozenset({"5"})), {"k": "-7"}, True),
        (Requirement("k", "Lt", frozenset({"5"})), {"k": "x"}, False),
        (Requirement("k", "Lt", frozenset({"5"})), {}, False),
        # No usable bound: not exactly one value, or not an int64.
        (Requirement("k", "Gt", frozenset({"1", "2"})), {"k": "9"}, False),
        (Requirement("k", "Gt", frozenset({"1.5"})), {"k": "9"}, False),
        (Requirement("k", "Lt", frozenset({str(2**63)})), {"k": "0"}, False),
        # An operator no parser accepts matches nothing (the lenient volume parser keeps it).
        (Requirement("k", "Near", frozenset({"a"})), {"k": "a"}, False),
    ],
)
def test_requirement_semantics(req: Requirement, labels: dict[str, str], want: bool) -> None:
    assert req.matches(labels) is want


def test_the_bound_is_derived_from_the_values() -> None:
    assert Requirement("k", "Gt", frozenset({"+12"})).number == 12
    assert Requirement("k", "In", frozenset({"12"})).number is None
    # Equal requirements hash alike whatever way they were built.
    assert {Requirement("k", "Lt", frozenset({"3"}))} == {Requirement("k", "Lt", frozenset({"3"}))}


def test_parse_int64_is_strconv_strict() -> None:
    assert parse_int64("-9223372036854775808") == -(2**63)
    assert parse_int64("9223372036854775808") is None
    assert [parse_int64(t) for t in (" 1", "1_0", "\u0661", "", "+")] == [None] * 5


def test_label_selector_nil_empty_and_anded() -> None:
    assert not NOTHING.matches({})
    assert EVERYTHING.matches({"any": "thing"}) and EVERYTHING.everything
    sel = LabelSelector((Requirement("a", "In", frozenset({"1"})), Requirement("b", "Exists")))
    assert sel.matches({"a": "1", "b": ""}) and not sel.matches({"a": "1"})
    assert sel.anchor == ("a", frozenset({"1"}))


def test_key_and_value_syntax() -> None:
    assert label_key_error("example.com/gpu-model") is None
    assert "prefix part" in (label_key_error("Example.com/x") or "")
    assert "name part" in (label_key_error("-x") or "")
    assert label_value_error("") is None
    assert "valid label value" in (label_value_error("a" * 64) or "")


def test_list_and_object_fields_report_their_path() -> None:
    errors: list[str] = []
    assert as_list(None, "p", errors) == ()
    assert as_list("x", "p", errors) == ()
    assert as_map(None, "q", errors) == {}
    assert errors == [
        'p: Invalid value: "x": must be a list',
        "q: Invalid value: null: must be an object",
    ]


def test_freeze_is_order_insensitive_for_maps_and_tells_bools_from_ints() -> None:
    assert freeze({"a": [1, {"b": 2}], "c": None}) == freeze({"c": None, "a": [1, {"b": 2}]})
    assert freeze({"w": True}) != freeze({"w": 1})

"""pod_selector: metav1.LabelSelector semantics, matchLabelKeys merging, namespace scope."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.model.pod import PodInfo, PodRequest
from gpusched.plugins.helper.pod_selector import (
    EVERYTHING,
    NOTHING,
    NamespaceScope,
    PodSelector,
    parse_label_selector,
    parse_namespace_scope,
    with_label_keys,
)


def parse(raw: Any) -> tuple[Any, list[str]]:
    errors: list[str] = []
    return parse_label_selector(raw, "sel", errors), errors


@pytest.mark.parametrize(
    ("raw", "labels", "want"),
    [
        (None, {"a": "1"}, False),  # nil matches nothing
        ({}, {}, True),  # {} matches everything
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]},
            {"a": "2"},
            True,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        (
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]},
            {"a": "1"},
            False,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
        (
            {
                "matchLabels": {"a": "1"},
                "matchExpressions": [{"key": "b", "operator": "Exists"}],
            },
            {"a": "1"},
            False,
        ),
    ],
)
def test_matches(raw: Any, labels: dict[str, str], want: bool) -> None:
    selector, errors = parse(raw)
    assert errors == []
    assert selector.matches(labels) is want


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "Like", "values": ["1"]}]},
            "Unsupported value",
        ),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "Required value"),
        ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}, "Forbidden"),
        ({"matchLabels": {"-bad-": "1"}}, "name part must be"),
        ({"matchLabels": {"a": "not ok"}}, "a valid label value"),
        ("text", "must be an object"),
    ],
)
def test_malformed_selectors_are_reported_and_match_nothing(raw: Any, fragment: str) -> None:
    selector, errors = parse(raw)
    assert selector == NOTHING
    assert any(fragment in e for e in errors), errors


def test_anchor_is_the_narrowest_in_else_an_exists() -> None:
    sel, _ = parse(
        {
            "matchExpressions": [
                {"key": "x", "operator": "Exists"},
                {"key": "a", "operator": "In", "values": ["1", "2"]},
                {"key": "b", "operator": "In", "values": ["3"]},
                {"key": "c", "operator": "NotIn", "values": ["4"]},
            ]
        }
    )
    assert sel.anchor == ("b", frozenset({"3"}))
    only_exists, _ = parse({"matchExpressions": [{"key": "x", "operator": "Exists"}]})
    assert only_exists.anchor == ("x", None)
    assert EVERYTHING.anchor is None


def test_label_keys_merge_like_the_api_server() -> None:
    sel, _ = parse({"matchLabels": {"app": "web"}})
    merged = with_label_keys(sel, {"app": "web", "hash": "v1"}, ["hash", "absent"], ["app"])
    assert merged.matches({"app": "web", "hash": "v1"}) is False  # mismatch on app
    only_match = with_label_keys(sel, {"app": "web", "hash": "v1"}, ["hash"], [])
    assert only_match.matches({"app": "web", "hash": "v1"})
    assert not only_match.matches({"app": "web", "hash": "v2"})
    assert with_label_keys(NOTHING, {"hash": "v1"}, ["hash"], []) == NOTHING


def test_namespace_scope() -> None:
    errors: list[str] = []
    own = parse_namespace_scope("ns", None, None, "t", errors)
    assert own == NamespaceScope(frozenset({"ns"}))
    known = {"a": {"team": "x"}, "b": {"team": "y"}, "ns": {}}
    listed = parse_namespace_scope("ns", ["b"], {"matchLabels": {"team": "x"}}, "t", errors)
    assert listed.resolve(known) == frozenset({"a", "b"})
    assert listed.contains("a", {"team": "x"}) and listed.contains("b", {})
    assert not listed.contains("ns", {})
    every = parse_namespace_scope("ns", [], {}, "t", errors)
    assert every.resolve(known) is None and every.contains("zzz", {})
    assert errors == []


def test_pod_selector_is_a_pod_matcher() -> None:
    sel, _ = parse({"matchLabels": {"app": "web"}})
    pod = PodInfo("u", "a", "p", PodRequest(), labels={"app": "web"})
    assert PodSelector(frozenset({"a"}), sel).matches(pod)
    assert PodSelector(None, sel).matches(pod)
    assert not PodSelector(frozenset({"b"}), sel).matches(pod)

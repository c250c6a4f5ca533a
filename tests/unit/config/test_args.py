"""The generic YAML -> Args converter: types, unknown keys, defaults, validate()."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

import pytest

from gpusched.config.args import YAML_KEY, ConfigErrors, camel, convert, snake, to_data
from gpusched.config.profile import ConfigError
from tests.fake_plugins import FitArgs, Mode, ResourceSpec, ScoringStrategy, ThermalArgs

PATH = "profiles[0].pluginConfig[Thermal].args"


def test_camel_and_snake_are_inverse() -> None:
    assert camel("red_line_celsius") == "redLineCelsius"
    assert camel("qps") == "qps"
    assert snake("redLineCelsius") == "red_line_celsius"
    assert snake(camel("pod_max_backoff_seconds")) == "pod_max_backoff_seconds"


def test_defaults_kept_for_absent_keys_and_none() -> None:
    assert convert(ThermalArgs, {}, PATH) == ThermalArgs()
    assert convert(ThermalArgs, None, PATH) == ThermalArgs()
    assert convert(ThermalArgs, {"coolCelsius": 40}, PATH) == ThermalArgs(cool_celsius=40.0)


def test_cross_field_validate_names_field_and_value() -> None:
    with pytest.raises(ConfigError) as ei:
        convert(ThermalArgs, {"redLineCelsius": 40}, PATH)
    assert str(ei.value) == f"{PATH}.redLineCelsius: must be > coolCelsius (50.0), got 40"
    assert ei.value.path == f"{PATH}.redLineCelsius"


def test_validate_shows_effective_value_when_the_default_is_the_culprit() -> None:
    with pytest.raises(
        ConfigError, match=r"redLineCelsius: must be > coolCelsius \(90.0\), got 85.0"
    ):
        convert(ThermalArgs, {"coolCelsius": 90}, PATH)


def test_unknown_key_rejected_with_hint_and_known_fields() -> None:
    with pytest.raises(ConfigError) as ei:
        convert(ThermalArgs, {"red_line_celsius": 90}, PATH)
    msg = str(ei.value)
    assert msg.startswith(f"{PATH}.red_line_celsius: unknown field")
    assert "did you mean 'redLineCelsius'?" in msg
    assert "coolCelsius, redLineCelsius, mode" in msg


@pytest.mark.parametrize(
    ("data", "where", "message"),
    [
        ({"coolCelsius": "hot"}, "coolCelsius", "expected a number, got 'hot'"),
        ({"coolCelsius": True}, "coolCelsius", "expected a number, got true"),
        ({"coolCelsius": float("nan")}, "coolCelsius", "expected a finite number, got nan"),
        ({"mode": "lenient"}, "mode", "must be one of 'strict', 'soft'; got 'lenient'"),
        ({"coolCelsius": [1]}, "coolCelsius", "expected a number, got [1]"),
    ],
)
def test_type_errors_name_field_and_value(
    data: dict[str, object], where: str, message: str
) -> None:
    with pytest.raises(ConfigError) as ei:
        convert(ThermalArgs, data, PATH)
    assert str(ei.value) == f"{PATH}.{where}: {message}"


def test_enum_by_value_or_by_name() -> None:
    assert convert(ThermalArgs, {"mode": "soft"}).mode is Mode.SOFT
    assert convert(ThermalArgs, {"mode": "SOFT"}).mode is Mode.SOFT


def test_literal_tuple_and_nested_dataclasses() -> None:
    args = convert(
        FitArgs,
        {
            "scoringStrategy": {
                "type": "MostAllocated",
                "resources": [{"name": "cpu", "weight": 2}, {"name": "nvidia.com/gpu"}],
            }
        },
        "x",
    )
    assert args == FitArgs(
        ScoringStrategy("MostAllocated", (ResourceSpec("cpu", 2), ResourceSpec("nvidia.com/gpu")))
    )
    assert isinstance(args.scoring_strategy.resources, tuple)


def test_literal_rejects_other_values() -> None:
    with pytest.raises(ConfigError) as ei:
        convert(FitArgs, {"scoringStrategy": {"type": "Balanced"}}, "a")
    assert str(ei.value) == (
        "a.scoringStrategy.type: must be one of 'LeastAllocated', 'MostAllocated'; got 'Balanced'"
    )


def test_nested_errors_have_indexed_paths_and_all_are_reported() -> None:
    with pytest.raises(ConfigErrors) as ei:
        convert(
            FitArgs,
            {
                "scoringStrategy": {
                    "resources": [
                        {"name": "cpu", "weight": 1.5},
                        {"weight": 0},
                        {"name": "x", "weight": 0},
                    ]
                }
            },
            "a",
        )
    lines = str(ei.value).splitlines()
    assert lines == [
        "a.scoringStrategy.resources[0].weight: expected an integer, got 1.5",
        "a.scoringStrategy.resources[1].name: required field is missing",
        "a.scoringStrategy.resources[2].weight: must be > 0, got 0",
    ]
    assert ei.value.errors[0].path == "a.scoringStrategy.resources[0].weight"


def test_outer_validate_runs_after_nested_ok() -> None:
    with pytest.raises(
        ConfigError, match=r"^a\.resources: resource names must be unique, got \[\{'name'"
    ):
        convert(ScoringStrategy, {"resources": [{"name": "cpu"}, {"name": "cpu"}]}, "a")


def test_quoted_string_value_is_not_repeated() -> None:
    @dataclass(frozen=True)
    class Named:
        kind: str = "a"

        def validate(self) -> list[tuple[str, str]]:
            return [] if self.kind == "a" else [("kind", f"unsupported value {self.kind!r}")]

    with pytest.raises(ConfigError) as ei:
        convert(Named, {"kind": "b"}, "x")
    assert str(ei.value) == "x.kind: unsupported value 'b'"


def test_not_a_mapping() -> None:
    with pytest.raises(ConfigError, match=r"^a: expected a mapping, got \[1, 2\]"):
        convert(ThermalArgs, [1, 2], "a")


@dataclass(frozen=True)
class Everything:
    count: int = 1
    flag: bool = False
    label: str = "x"
    maybe: float | None = None
    either: int | str = 0
    pair: tuple[int, str] = (0, "")
    tags: frozenset[str] = frozenset()
    items: list[int] = field(default_factory=list)
    table: dict[str, float] = field(default_factory=dict)
    kind: Literal[1, 2] = 1
    ttl: float = field(default=1.0, metadata={YAML_KEY: "ttlSECONDS"})


def test_every_supported_type_round_trips() -> None:
    data = {
        "count": 3,
        "flag": True,
        "label": "y",
        "maybe": 2,
        "either": "s",
        "pair": [1, "a"],
        "tags": ["a", "b"],
        "items": [1, 2],
        "table": {"a": 1},
        "kind": 2,
        "ttlSECONDS": 5,
    }
    got = convert(Everything, data)
    assert got == Everything(
        3, True, "y", 2.0, "s", (1, "a"), frozenset({"a", "b"}), [1, 2], {"a": 1.0}, 2, 5.0
    )
    again = to_data(got)
    again["tags"] = sorted(again["tags"])
    assert convert(Everything, again) == got


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"count": 1.0}, "count: expected an integer, got 1.0"),
        ({"count": True}, "count: expected an integer, got true"),
        ({"flag": "true"}, "flag: expected a boolean (true/false), got 'true'"),
        ({"flag": 1}, "flag: expected a boolean (true/false), got 1"),
        ({"label": 5}, "label: expected a string, got 5"),
        ({"either": 1.5}, "either: must be an integer or a string, got 1.5"),
        ({"pair": [1]}, "pair: expected a list of 2 items, got 1"),
        ({"pair": "ab"}, "pair: expected a list, got 'ab'"),
        ({"table": {"a": "b"}}, "table[a]: expected a number, got 'b'"),
        ({"kind": True}, "kind: must be one of 1, 2; got true"),
        ({"ttlSeconds": 1}, "ttlSeconds: unknown field (did you mean 'ttlSECONDS'?)"),
    ],
)
def test_scalar_strictness(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as ei:
        convert(Everything, data)
    assert str(ei.value).startswith(message)


def test_none_allowed_only_for_optional() -> None:
    assert convert(Everything, {"maybe": None}).maybe is None
    with pytest.raises(ConfigError, match="count: expected an integer, got null"):
        convert(Everything, {"count": None})


@dataclass(frozen=True)
class Refuses:
    n: int = 0

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError("n must not be negative")

    def validate(self) -> list[tuple[str, str]]:
        if self.n == 7:
            raise RuntimeError("boom")
        return []


def test_post_init_and_crashing_validate_become_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"^a: n must not be negative$"):
        convert(Refuses, {"n": -1}, "a")
    with pytest.raises(ConfigError, match=r"^a: validate\(\) raised RuntimeError\('boom'\)"):
        convert(Refuses, {"n": 7}, "a")


@dataclass(frozen=True)
class Required:
    must: int


def test_required_field() -> None:
    with pytest.raises(ConfigError, match=r"^a\.must: required field is missing$"):
        convert(Required, {}, "a")


def test_unresolvable_annotation_is_reported_as_plugin_bug() -> None:
    bad = dataclasses.make_dataclass("Bad", [("x", "NoSuchType", 0)], frozen=True)
    with pytest.raises(ConfigError, match=r"^a: cannot read the fields of Bad"):
        convert(bad, {}, "a")


def test_non_string_key() -> None:
    with pytest.raises(ConfigError, match=r"^a\.1: field names must be strings, got 1"):
        convert(ThermalArgs, {1: 2}, "a")


@pytest.mark.parametrize(("path", "shown"), [("", "['']"), ("a", "a['']")])
def test_a_blank_key_is_shown_quoted_in_the_path(path: str, shown: str) -> None:
    """An empty key gave the path "" (the message read ": unknown field ...")."""
    with pytest.raises(ConfigError) as ei:
        convert(ThermalArgs, {"": 2}, path)
    assert ei.value.path == shown and str(ei.value).startswith(f"{shown}: unknown field")

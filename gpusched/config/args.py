"""Typed plugin args: a YAML mapping in, a plugin's frozen `Args` dataclass out.

The YAML speaks camelCase (as KubeSchedulerConfiguration's pluginConfig does) and the
dataclasses speak snake_case; `convert` maps one onto the other field by field, checks every
value against the field's annotation, keeps the dataclass defaults for absent keys, rejects
unknown keys, and finally runs the instance's own `validate()` for cross-field rules.

Every problem becomes a `ConfigError` whose path names the field and whose message shows the
offending value, e.g.
`profiles[0].pluginConfig[Thermal].args.redLineCelsius: must be > coolCelsius (50.0), got 40`.
All problems of one document are collected (`ConfigErrors`), so a user fixes them in one pass.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

from gpusched.config.profile import ConfigError

T = TypeVar("T")

YAML_KEY = "gpusched.io/yaml-key"
"""Field metadata key overriding a field's YAML spelling when camelCase of the snake_case
name is not the documented one, e.g. `field(metadata={YAML_KEY: "nodeCIDRMaskSize"})`
(Kubernetes spells acronyms in capitals; camel() alone would say nodeCidrMaskSize)."""

__all__ = [
    "YAML_KEY",
    "ConfigErrors",
    "ErrorList",
    "camel",
    "convert",
    "show",
    "snake",
    "to_data",
]


# The plural says what it is (several ConfigErrors), and it is still caught as a ConfigError.
class ConfigErrors(ConfigError):  # noqa: N818
    """Several configuration problems at once; `errors` keeps each with its own path."""

    def __init__(self, errors: Sequence[ConfigError]) -> None:
        if not errors:
            raise ValueError("ConfigErrors needs at least one error")
        first = errors[0]
        super().__init__(first.path, str(first)[len(first.path) + 2 :])
        self.errors: tuple[ConfigError, ...] = tuple(_flatten(errors))

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)


def _flatten(errors: Iterable[ConfigError]) -> Iterable[ConfigError]:
    for e in errors:
        if isinstance(e, ConfigErrors):
            yield from e.errors
        else:
            yield e


class ErrorList:
    """Collects errors while a document is walked; `raise_if_any` ends the walk."""

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []

    def add(self, path: str, message: str) -> None:
        self.errors.append(ConfigError(path, message))

    def extend(self, exc: ConfigError) -> None:
        self.errors.extend(_flatten([exc]))

    def __bool__(self) -> bool:
        return bool(self.errors)

    def __len__(self) -> int:
        return len(self.errors)

    def raise_if_any(self) -> None:
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise ConfigErrors(self.errors)


# -- names -----------------------------------------------------------------------------------

_UPPER = re.compile(r"(?<!^)(?=[A-Z])")


def camel(name: str) -> str:
    """`red_line_celsius` -> `redLineCelsius`."""
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def snake(name: str) -> str:
    """`redLineCelsius` -> `red_line_celsius` (the inverse of `camel` for field names)."""
    return _UPPER.sub("_", name).lower()


def show(value: object) -> str:
    """A value as the user wrote it in YAML: strings quoted, booleans and null YAML-style."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return repr(value.value)
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple) and len(value) > 8:
        return f"a list of {len(value)} items"
    return repr(value)


def yaml_key(f: dataclasses.Field[Any]) -> str:
    """A dataclass field's key in YAML."""
    key = f.metadata.get(YAML_KEY)
    return key if isinstance(key, str) else camel(f.name)


def join(path: str, key: str) -> str:
    if not key.strip():
        # A blank key would leave the path empty (": unknown field"): show it quoted.
        key = f"[{key!r}]"
    if not path:
        return key
    return f"{path}{key}" if key.startswith("[") else f"{path}.{key}"


# -- conversion ------------------------------------------------------------------------------


class _Bad:
    """Marks a value that failed conversion (its errors are already recorded)."""


_BAD = _Bad()


def convert(
    cls: type[T],
    data: object,
    path: str = "",
    *,
    skip: Iterable[str] = (),
    handled: Iterable[str] = (),
) -> T:
    """Build `cls` (a dataclass) from a YAML mapping; raises `ConfigError`/`ConfigErrors`.

    `skip` names snake_case fields the YAML may not set (they keep their defaults), for
    dataclasses that mix document fields with fields the loader fills itself; `handled`
    names YAML keys the caller reads itself (accepted here, and offered in typo hints).
    """
    errors = ErrorList()
    out = _dataclass(cls, data, path, errors, skip=frozenset(skip), handled=tuple(handled))
    errors.raise_if_any()
    assert not isinstance(out, _Bad)
    return out


def _dataclass(
    cls: type[T],
    value: object,
    path: str,
    errors: ErrorList,
    *,
    skip: frozenset[str] = frozenset(),
    handled: tuple[str, ...] = (),
) -> T | _Bad:
    if value is None:
        value = {}  # `args:` with nothing under it means "all defaults", as in kube-scheduler
    if not isinstance(value, Mapping):
        errors.add(path or "<root>", f"expected a mapping, got {show(value)}")
        return _BAD
    try:
        hints = typing.get_type_hints(cls)
    except Exception as exc:  # a plugin's annotations that do not resolve are a plugin bug
        errors.add(path or "<root>", f"cannot read the fields of {cls.__qualname__}: {exc!r}")
        return _BAD
    fields = {yaml_key(f): f for f in dataclasses.fields(cast(Any, cls)) if f.init}
    settable = {k: f for k, f in fields.items() if f.name not in skip}
    bad = len(errors)
    known = [*handled, *settable]
    for key in value:
        if not isinstance(key, str):
            errors.add(join(path, str(key)), f"field names must be strings, got {show(key)}")
        elif key not in known:
            errors.add(join(path, key), _unknown_field(key, known))
    kwargs: dict[str, Any] = {}
    for key, f in settable.items():
        fpath = join(path, key)
        if key in value:
            v = _value(hints[f.name], value[key], fpath, errors)
            if not isinstance(v, _Bad):
                kwargs[f.name] = v
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            errors.add(fpath, "required field is missing")
    if len(errors) > bad:
        return _BAD  # cross-field validation of a half-converted object would only add noise
    try:
        obj = cls(**kwargs)
    except (TypeError, ValueError) as exc:  # a __post_init__ that refuses the values
        errors.add(path or "<root>", str(exc))
        return _BAD
    _run_validate(obj, value, path, errors)
    return obj


def _unknown_field(key: str, known: list[str]) -> str:
    # Case-insensitive, and snake_case probed as camelCase: the usual slips are
    # `red_line_celsius` and `assumeTtlSeconds`.
    lowered = {k.lower(): k for k in known}
    hint = difflib.get_close_matches(camel(key).lower(), list(lowered), n=1)
    msg = "unknown field"
    if hint:
        msg += f" (did you mean {lowered[hint[0]]!r}?)"
    return msg + f"; known fields: {', '.join(known) or 'none'}"


def _run_validate(obj: object, raw: Mapping[str, Any], path: str, errors: ErrorList) -> None:
    validate = getattr(obj, "validate", None)
    if not callable(validate):
        return
    try:
        problems = validate()
    except Exception as exc:  # a validate() that crashes must not hide the config's path
        errors.add(path or "<root>", f"validate() raised {exc!r}")
        return
    for field_name, message in problems or ():
        fpath = join(path, field_name) if field_name else (path or "<root>")
        found, value = _lookup(raw, obj, field_name)
        # The contract: every message shows the bad value. Messages that already say
        # "got ..." or quote the string keep their wording; a number is appended anyway,
        # since "10" inside "<= 100" would be a false match.
        said = "got " in message or (isinstance(value, str) and repr(value) in message)
        shown = f"{message}, got {show(value)}" if found and not said else message
        errors.add(fpath, shown)


_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _lookup(raw: Mapping[str, Any], obj: object, dotted: str) -> tuple[bool, object]:
    """The user's value at a field path like `resources[1].weight`, else the converted one."""
    cur: object = raw
    for m in _STEP.finditer(dotted):
        key, idx = m.group(1), m.group(2)
        if key is not None and isinstance(cur, Mapping) and key in cur:
            cur = cur[key]
        elif idx is not None and isinstance(cur, list | tuple) and int(idx) < len(cur):
            cur = cur[int(idx)]
        else:
            break
    else:
        if dotted:
            return True, cur
    # Not written by the user (a default failed a cross-field rule): show the effective value.
    if dataclasses.is_dataclass(obj):
        by_key = {yaml_key(f): f.name for f in dataclasses.fields(obj)}
        if dotted in by_key:
            return True, getattr(obj, by_key[dotted])
    return False, None


_NoneType = type(None)


def _value(tp: Any, value: object, path: str, errors: ErrorList) -> Any:
    if tp is Any or tp is object:
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _value(args[0], value, path, errors)
    if origin is typing.Union or origin is types.UnionType:
        return _union(args, value, path, errors)
    if origin is typing.Literal:
        if any(value == a and type(value) is type(a) for a in args):
            return value
        errors.add(path, f"must be one of {', '.join(show(a) for a in args)}; got {show(value)}")
        return _BAD
    if tp is _NoneType:
        if value is None:
            return None
        errors.add(path, f"must be null, got {show(value)}")
        return _BAD
    if origin in (tuple, list, set, frozenset, Sequence):
        return _sequence(origin, args, value, path, errors)
    if origin in (dict, Mapping):
        return _mapping(args, value, path, errors)
    if isinstance(tp, type):
        return _scalar(tp, value, path, errors)
    errors.add(path, f"unsupported field type {tp!r} (a plugin bug)")
    return _BAD


def _union(args: tuple[Any, ...], value: object, path: str, errors: ErrorList) -> Any:
    if value is None and _NoneType in args:
        return None
    arms = [a for a in args if a is not _NoneType]
    if len(arms) == 1:
        return _value(arms[0], value, path, errors)
    for arm in arms:
        trial = ErrorList()
        out = _value(arm, value, path, trial)
        if not trial:
            return out
    errors.add(path, f"must be {' or '.join(_describe(a) for a in args)}, got {show(value)}")
    return _BAD


def _describe(tp: Any) -> str:
    names: dict[Any, str] = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        _NoneType: "null",
    }
    if tp in names:
        return names[tp]
    origin = typing.get_origin(tp)
    if origin in (tuple, list, set, frozenset):
        return "a list"
    if dataclasses.is_dataclass(tp) or origin in (dict, Mapping):
        return "a mapping"
    return getattr(tp, "__name__", repr(tp))


def _sequence(
    origin: Any, args: tuple[Any, ...], value: object, path: str, errors: ErrorList
) -> Any:
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        errors.add(path, f"expected a list, got {show(value)}")
        return _BAD
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(value) != len(args):
            errors.add(path, f"expected a list of {len(args)} items, got {len(value)}")
            return _BAD
        item_types: list[Any] = list(args)
    else:
        item_types = [args[0] if args else Any] * len(value)
    pairs = enumerate(zip(item_types, value, strict=True))
    items = [_value(t, v, f"{path}[{i}]", errors) for i, (t, v) in pairs]
    if any(isinstance(v, _Bad) for v in items):
        return _BAD
    if origin in (set, frozenset):
        return frozenset(items) if origin is frozenset else set(items)
    if origin is list:
        return items
    return tuple(items)  # frozen args want tuples, Sequence included


def _mapping(args: tuple[Any, ...], value: object, path: str, errors: ErrorList) -> Any:
    if not isinstance(value, Mapping):
        errors.add(path, f"expected a mapping, got {show(value)}")
        return _BAD
    kt, vt = args if len(args) == 2 else (Any, Any)
    out: dict[Any, Any] = {}
    ok = True
    for k, v in value.items():
        ck = _value(kt, k, f"{path}[{k!s}]", errors)
        cv = _value(vt, v, f"{path}[{k!s}]", errors)
        if isinstance(ck, _Bad) or isinstance(cv, _Bad):
            ok = False
        else:
            out[ck] = cv
    return out if ok else _BAD


def _scalar(tp: type, value: object, path: str, errors: ErrorList) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
        # YAML's `"true"` (quoted) or `1` is a different type; say so rather than guess.
        errors.add(path, f"expected a boolean (true/false), got {show(value)}")
        return _BAD
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        errors.add(path, f"expected an integer, got {show(value)}")
        return _BAD
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):
                errors.add(path, f"expected a finite number, got {show(value)}")
                return _BAD
            return float(value)
        errors.add(path, f"expected a number, got {show(value)}")
        return _BAD
    if tp is str:
        if isinstance(value, str):
            return value
        errors.add(path, f"expected a string, got {show(value)}")
        return _BAD
    if issubclass(tp, enum.Enum):
        return _enum(tp, value, path, errors)
    if dataclasses.is_dataclass(tp):
        return _dataclass(tp, value, path, errors)
    if isinstance(value, tp):
        return value
    errors.add(path, f"expected {_describe(tp)}, got {show(value)}")
    return _BAD


def _enum(tp: type[enum.Enum], value: object, path: str, errors: ErrorList) -> Any:
    for member in tp:
        # By value (what the YAML normally holds) or by member name, for enums whose values
        # are numbers but whose names are the readable spelling.
        if (member.value == value and type(member.value) is type(value)) or member.name == value:
            return member
    allowed = ", ".join(show(m.value) for m in tp)
    errors.add(path, f"must be one of {allowed}; got {show(value)}")
    return _BAD


# -- the way back ----------------------------------------------------------------------------


def to_data(obj: object) -> Any:
    """A converted value back to YAML-shaped data (camelCase keys, lists, enum values):
    what `explain` prints and what `convert` accepts again."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {yaml_key(f): to_data(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Mapping):
        return {k: to_data(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [to_data(v) for v in obj]
    return obj


ArgsValidator = Callable[[], list[tuple[str, str]]]
"""What a plugin's `Args.validate` looks like: (camelCaseField, message) per problem."""

"""A plugin's typed args, defaulted and validated when the plugin is built.

The configuration loader validates every plugin's args before any plugin is built, so a
problem here means the plugin was constructed directly (tests, tools) with bad args: it
raises, naming each field, instead of scheduling with them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar


class ValidatedArgs(Protocol):
    def validate(self) -> list[tuple[str, str]]: ...


A = TypeVar("A", bound=ValidatedArgs)


def checked_args(args: A | None, default: Callable[[], A]) -> A:
    """`args`, or `default()` when None; ValueError listing `field: problem` pairs if they
    do not validate."""
    got = args if args is not None else default()
    problems = got.validate()
    if problems:
        raise ValueError("; ".join(f"{f}: {m}" for f, m in problems))
    return got

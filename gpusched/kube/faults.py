"""Fault injection for the fault suite and soaks: kill -9 the process at a chosen point.

``GPUSCHED_FAULT=<point>:<n>`` makes the process SIGKILL itself the n-th time it reaches
`point` (counted from start, n >= 1); unset or empty, nothing is armed. The points:

* ``after-assume``: a scheduling cycle assumed a pod in the cache, before its binding task
  starts (nothing of it has reached the API server);
* ``bind-sent``: the bytes of a Binding POST have been handed to the socket, before any
  answer is read (the API server may or may not apply it);
* ``bind-returned``: a Binding was answered 2xx, before the scheduler records anything.

`gpusched run` reads the variable once at start (`arm_from_env`); a malformed value stops
start-up (exit 2) naming the variable. For tests and soaks only: a production Deployment
never sets it. When unset, `reached` is one test of a module global and no HTTP hook is
installed (`trace_configs` returns none).

A line naming the point goes to stderr (an unbuffered write) just before the kill, so a
test can tell which fault ended the process.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace

import aiohttp

ENV = "GPUSCHED_FAULT"
AFTER_ASSUME = "after-assume"
BIND_SENT = "bind-sent"
BIND_RETURNED = "bind-returned"
POINTS = (AFTER_ASSUME, BIND_SENT, BIND_RETURNED)
_MAX_N = 10**9


class FaultSpecError(ValueError):
    """A malformed GPUSCHED_FAULT; the message names the variable and the expected form."""


@dataclass(frozen=True, slots=True)
class Fault:
    point: str
    n: int


def parse(value: str) -> Fault | None:
    """`value` of GPUSCHED_FAULT as a Fault; None for an empty value. Raises FaultSpecError."""
    text = value.strip()
    if not text:
        return None
    point, sep, count = text.partition(":")
    problem = ""
    if not sep:
        problem = "no ':<n>'"
    elif point not in POINTS:
        problem = f"unknown point {point!r}"
    elif not (count.isascii() and count.isdigit()) or not 1 <= int(count) <= _MAX_N:
        problem = f"n must be a whole number from 1, got {count!r}"
    if problem:
        raise FaultSpecError(
            f"{ENV}={value!r}: {problem}; expected <point>:<n> with point one of"
            f" {', '.join(POINTS)} and n >= 1 (kill -9 the n-th time the point is reached),"
            " or leave it unset"
        )
    return Fault(point, int(count))


class _Hook:
    """The armed fault and how many times its point was reached (one per process)."""

    __slots__ = ("count", "fault")

    def __init__(self) -> None:
        self.fault: Fault | None = None
        self.count = 0


_hook = _Hook()


def arm(fault: Fault | None) -> None:
    """Arm `fault` (None disarms) and reset the count."""
    _hook.fault = fault
    _hook.count = 0


def arm_from_env(environ: Mapping[str, str] = os.environ) -> Fault | None:
    """Parse GPUSCHED_FAULT once and arm it; the fault armed, or None. Raises FaultSpecError."""
    fault = parse(environ.get(ENV, ""))
    arm(fault)
    return fault


def armed() -> Fault | None:
    return _hook.fault


def reached(point: str) -> None:
    """The process reached `point`: SIGKILL it if that is the armed point's n-th time."""
    fault = _hook.fault
    if fault is None or fault.point != point:
        return
    _hook.count += 1
    if _hook.count == fault.n:
        _kill(point)


def _kill(point: str) -> None:
    os.write(2, f"{ENV}: kill -9 at {point} (reached {_hook.count} time(s))\n".encode())
    os.kill(os.getpid(), signal.SIGKILL)


def _is_binding(method: str, url: object) -> bool:
    return method == "POST" and str(getattr(url, "path", url)).endswith("/binding")


async def _on_chunk_sent(
    session: aiohttp.ClientSession,
    context: SimpleNamespace,
    params: aiohttp.TraceRequestChunkSentParams,
) -> None:
    # aiohttp calls this just before it writes the chunk, then writes it without yielding
    # to the event loop; the point is reached on the loop's next turn, with the bytes in the
    # socket's send buffer and no answer read.
    if _is_binding(params.method, params.url) and not getattr(context, "fault_counted", False):
        context.fault_counted = True  # once per request, however many chunks its body takes
        asyncio.get_running_loop().call_soon(reached, BIND_SENT)


def trace_configs() -> list[aiohttp.TraceConfig]:
    """The aiohttp hooks the armed fault needs on the API session (none unless bind-sent)."""
    if _hook.fault is None or _hook.fault.point != BIND_SENT:
        return []
    config = aiohttp.TraceConfig()
    config.on_request_chunk_sent.append(_on_chunk_sent)
    return [config]

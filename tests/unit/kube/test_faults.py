"""The fault hook (GPUSCHED_FAULT): parsed once, a bad value named, a count per point, and a
real SIGKILL at bind-sent with the Binding's bytes out of the process and no answer read
(a child process against a loopback socket server)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from collections.abc import Iterator

import pytest

from gpusched.kube import faults

GUARD = 30.0  # against a hang; the waits below are on a process or a socket


@pytest.fixture(autouse=True)
def disarmed() -> Iterator[None]:
    """The hook is module state: every test starts and ends with nothing armed."""
    faults.arm(None)
    yield
    faults.arm(None)


@pytest.fixture
def kills(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The points at which the process would have been killed (nothing is killed)."""
    seen: list[str] = []
    monkeypatch.setattr(faults, "_kill", seen.append)
    return seen


def test_parse_reads_point_and_count() -> None:
    assert faults.parse("bind-sent:3") == faults.Fault(faults.BIND_SENT, 3)
    assert faults.parse(" after-assume:1 ") == faults.Fault(faults.AFTER_ASSUME, 1)
    assert faults.parse("") is None
    assert faults.arm_from_env({}) is None and faults.armed() is None
    got = faults.arm_from_env({faults.ENV: "bind-returned:2"})
    assert got == faults.Fault(faults.BIND_RETURNED, 2) and faults.armed() == got


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("bind-sent", "no ':<n>'"),
        ("bind-sent:0", "n must be"),
        ("bind-sent:-1", "n must be"),
        ("bind-sent:x", "n must be"),
        ("bind-sent:²", "n must be"),  # isdigit() but not a number int() takes
        ("bind-sent:", "n must be"),
        ("bind_sent:1", "unknown point"),
        ("kill:1", "unknown point"),
    ],
)
def test_a_malformed_value_is_an_error_naming_the_variable(value: str, why: str) -> None:
    with pytest.raises(faults.FaultSpecError) as caught:
        faults.arm_from_env({faults.ENV: value})
    message = str(caught.value)
    assert message.startswith(f"GPUSCHED_FAULT={value!r}: ")
    assert why in message and "after-assume, bind-sent, bind-returned" in message
    assert faults.armed() is None


def test_only_the_nth_time_at_the_armed_point_kills(kills: list[str]) -> None:
    faults.arm(faults.Fault(faults.BIND_RETURNED, 3))
    for _ in range(5):
        faults.reached(faults.AFTER_ASSUME)  # another point: not counted
    faults.reached(faults.BIND_RETURNED)
    faults.reached(faults.BIND_RETURNED)
    assert kills == []
    faults.reached(faults.BIND_RETURNED)
    assert kills == [faults.BIND_RETURNED]
    faults.reached(faults.BIND_RETURNED)
    assert kills == [faults.BIND_RETURNED]  # once


def test_unset_nothing_is_counted_and_no_http_hook_installed(kills: list[str]) -> None:
    for point in faults.POINTS:
        faults.reached(point)
    assert kills == []
    assert faults.trace_configs() == []
    faults.arm(faults.Fault(faults.AFTER_ASSUME, 1))
    assert faults.trace_configs() == []  # only bind-sent needs the HTTP hook
    faults.arm(faults.Fault(faults.BIND_SENT, 1))
    assert len(faults.trace_configs()) == 1


# A child that POSTs a pod (not a Binding: must not count), then a Binding through the
# real client path (Kube, bind_pod), with GPUSCHED_FAULT=bind-sent:1 in its environment.
CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from kubernetes_asyncio import client as k8s_client
    from gpusched.kube import faults
    from gpusched.kube.client import Kube
    from gpusched.kube.ops import bind_pod

    async def main():
        configuration = k8s_client.Configuration()
        configuration.host = sys.argv[1]
        async with Kube(k8s_client.ApiClient(configuration)) as kube:
            await kube.post("/api/v1/namespaces/ns/pods", {"kind": "Pod"})
            print("pod posted", flush=True)
            await bind_pod(kube, "ns", "p", "n1", uid="u")
            print("binding answered", flush=True)

    faults.arm_from_env()
    asyncio.run(main())
    """
)


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, bytes]:
    """One HTTP/1.1 request: (request line, body of Content-Length bytes)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return lines[0], await reader.readexactly(length)


async def test_bind_sent_kills_with_the_binding_sent_and_unanswered() -> None:
    requests: list[tuple[str, bytes]] = []
    binding = asyncio.get_running_loop().create_future()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line, body = await _read_request(reader)
                requests.append((line, body))
                if "/binding " in line:
                    binding.set_result(body)  # never answered
                    await reader.read()  # until the child's socket closes
                    return
                writer.write(
                    b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 2\r\n\r\n{}"
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CHILD,
            f"http://127.0.0.1:{port}",
            env={**os.environ, faults.ENV: "bind-sent:1"},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(child.communicate(), GUARD)
        body = await asyncio.wait_for(binding, GUARD)
    assert child.returncode == -signal.SIGKILL, err.decode()
    assert out.decode().splitlines() == ["pod posted"]  # the Binding's answer never read
    assert "GPUSCHED_FAULT: kill -9 at bind-sent (reached 1 time(s))" in err.decode()
    # The whole Binding reached the server (Content-Length bytes), sent before the kill.
    assert b'"kind": "Binding"' in body or b'"kind":"Binding"' in body
    assert [line.split()[1] for line, _ in requests] == [
        "/api/v1/namespaces/ns/pods",
        "/api/v1/namespaces/ns/pods/p/binding",
    ]

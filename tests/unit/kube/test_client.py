"""The raw-JSON client: every API connection has TCP keepalive, requests still work, the TLS
context follows the configuration (against a local aiohttp server on loopback)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s_client

from gpusched.kube.client import Kube, _ssl_context, proxy_in_env

GUARD = 10.0  # against a hang; every wait below is on an event or a socket


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """/version answers at once; /watch sends one line and stays open until `done`."""
    done = asyncio.Event()

    async def version(_: web.Request) -> web.Response:
        return web.json_response({"gitVersion": "v1.36.0"})

    async def watch(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b'{"type":"BOOKMARK"}\n')
        await done.wait()
        return response

    app = web.Application()
    app.router.add_get("/version", version)
    app.router.add_get("/watch", watch)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}", done
    finally:
        done.set()
        await runner.cleanup()


def _kube(host: str, keepalive: float | None = None) -> Kube:
    configuration = k8s_client.Configuration()
    configuration.host = host
    api = k8s_client.ApiClient(configuration)
    return Kube(api) if keepalive is None else Kube(api, keepalive_seconds=keepalive)


@pytest.mark.parametrize("keepalive", [None, 12.0])
async def test_api_connections_have_tcp_keepalive(
    server: tuple[str, asyncio.Event], keepalive: float | None
) -> None:
    # Without it a watch on a connection whose peer vanished (no FIN) waits on the kernel's
    # 2-hour default; with it the kernel drops the connection in about a minute.
    host, done = server
    async with _kube(host, keepalive) as kube, asyncio.timeout(GUARD):
        assert (await kube.get("/version"))["gitVersion"] == "v1.36.0"
        response = await kube._send("GET", "/watch", timeout=None)
        async with response:
            assert response.connection is not None
            sock = response.connection.transport.get_extra_info("socket")  # type: ignore[union-attr]
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            idle = int(keepalive or 30)
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == idle
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == idle // 3
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
            assert await response.content.readline() == b'{"type":"BOOKMARK"}\n'
            done.set()


def test_the_tls_context_follows_the_configuration() -> None:
    configuration = k8s_client.Configuration()
    assert _ssl_context(configuration).verify_mode == ssl.CERT_REQUIRED
    configuration.verify_ssl = False
    insecure = _ssl_context(configuration)
    assert insecure.verify_mode == ssl.CERT_NONE
    assert not insecure.check_hostname


@pytest.mark.parametrize(
    ("env", "trusted"),
    [
        ({}, False),
        ({"NO_PROXY": "127.0.0.1"}, False),
        ({"HTTPS_PROXY": "http://127.0.0.1:3128"}, True),
        ({"http_proxy": "http://127.0.0.1:3128"}, True),
    ],
)
async def test_the_session_trusts_the_environment_only_for_a_proxy(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], trusted: bool
) -> None:
    # trust_env also looks ~/.netrc up in a worker thread at every request: only a
    # configured proxy is worth that.
    for name in ("https_proxy", "http_proxy", "all_proxy", "ws_proxy", "wss_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert proxy_in_env() is trusted
    async with _kube("http://127.0.0.1:1") as kube:
        assert kube.api_client.rest_client.pool_manager.trust_env is trusted

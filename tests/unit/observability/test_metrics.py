"""The health and metrics server: /healthz answers 500 naming each problem, /readyz apart
(a real aiohttp server on loopback, an aiohttp client)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from gpusched.observability.metrics import Metrics, serve


@pytest.fixture
def problems() -> list[str]:
    return []


@pytest.fixture
def ready() -> list[bool]:
    return [False]


@pytest.fixture
async def base(problems: list[str], ready: list[bool]) -> AsyncIterator[str]:
    runner = await serve(Metrics(), 0, lambda: ready[0], lambda: list(problems), host="127.0.0.1")
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


async def _get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def test_healthz_names_what_is_unhealthy(base: str, problems: list[str]) -> None:
    assert await _get(f"{base}/healthz") == (200, "ok")
    problems.extend(
        ["watch pods: no progress for 200s (limit 180s)", "scheduling loop: no progress for 61s"]
    )
    status, body = await _get(f"{base}/healthz")
    assert status == 500
    assert body == (
        "unhealthy:\n"
        "- watch pods: no progress for 200s (limit 180s)\n"
        "- scheduling loop: no progress for 61s\n"
    )
    problems.clear()
    assert await _get(f"{base}/healthz") == (200, "ok")


async def test_readyz_stays_about_the_sync(
    base: str, problems: list[str], ready: list[bool]
) -> None:
    problems.append("watch nodes: no progress for 999s")
    assert await _get(f"{base}/readyz") == (503, "informers not synced yet")
    ready[0] = True
    assert await _get(f"{base}/readyz") == (200, "ok")
    status, body = await _get(f"{base}/metrics")
    assert status == 200 and "gpusched_leader" in body

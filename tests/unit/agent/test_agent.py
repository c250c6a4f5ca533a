"""The agent's loop on an in-memory API: publish on change only, log and retry on errors,
--once exit codes; the NVML import boundary; `gpusched agent` argument errors."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
from collections.abc import Callable
from importlib import import_module
from types import SimpleNamespace
from typing import Any, cast

import orjson
import pytest

from gpusched.agent.fakes._fake import FakeNvml
from gpusched.agent.inventory import annotation_value, read_inventory
from gpusched.agent.main import Agent, AgentArgs
from gpusched.agent.nvml import ENV, NvmlLoadError, load_nvml
from gpusched.cli import main
from gpusched.kube.client import ApiError, Kube
from gpusched.model import keys
from gpusched.observability.logging import make_logger

NODE = "gpu-node-1"


class FakeApi:
    """GET and merge-PATCH of nodes, the two calls the agent makes; `fail` raises once."""

    def __init__(self, annotations: dict[str, str] | None = None) -> None:
        self.nodes: dict[str, dict[str, Any]] = {
            NODE: {"metadata": {"name": NODE, "annotations": dict(annotations or {})}}
        }
        self.patches: list[dict[str, Any]] = []
        self.fail: Exception | None = None
        self.after_patch: Callable[[], None] = lambda: None
        self.closed = 0

    def _raise(self) -> None:
        if self.fail is not None:
            exc, self.fail = self.fail, None
            raise exc

    async def get(self, path: str) -> dict[str, Any]:
        self._raise()
        name = path.rsplit("/", 1)[-1]
        if name not in self.nodes:
            raise ApiError("GET", path, 404, '{"kind":"Status","reason":"NotFound"}')
        copy: dict[str, Any] = json.loads(json.dumps(self.nodes[name]))
        return copy

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        self._raise()
        self.patches.append(patch)
        name = path.rsplit("/", 1)[-1]
        self.nodes[name]["metadata"]["annotations"].update(patch["metadata"]["annotations"])
        self.after_patch()
        return self.nodes[name]

    async def close(self) -> None:
        self.closed += 1

    def annotation(self) -> str | None:
        value = self.nodes[NODE]["metadata"]["annotations"].get(keys.GPU_INVENTORY)
        return None if value is None else str(value)


def fake_nvml(layout: str = "dgx_a100") -> Any:
    """A fresh fake of `layout` (the layout modules share one FakeNvml per process)."""
    module = import_module(f"gpusched.agent.fakes.{layout}")
    return SimpleNamespace(
        **FakeNvml(module.FAKE.gpus, init_error=module.FAKE.init_error).namespace()
    )


def agent(api: FakeApi, nvml: Any, stream: io.StringIO, **args: Any) -> Agent:
    async def connect(_kubeconfig: str | None) -> Kube:
        return cast(Kube, api)

    log = make_logger(stream, "debug")
    return Agent(AgentArgs(**args), NODE, nvml, log, connect=connect)


def records(stream: io.StringIO) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


async def test_publishes_once_then_only_on_change() -> None:
    api, out = FakeApi(), io.StringIO()
    fake = FakeNvml(import_module("gpusched.agent.fakes.dgx_a100").GPUS)
    a = agent(api, SimpleNamespace(**fake.namespace()), out)
    assert await a.step()
    assert api.annotation() == annotation_value(read_inventory(fake_nvml()))
    assert await a.step()
    assert len(api.patches) == 1  # the same inventory: nothing written
    # The node's value re-serialised (keys sorted, indented) is still the same inventory.
    pretty = json.dumps(
        [dict(sorted(c.items())) for c in orjson.loads(api.annotation() or "[]")], indent=1
    )
    api.nodes[NODE]["metadata"]["annotations"][keys.GPU_INVENTORY] = pretty
    assert await a.step()
    assert len(api.patches) == 1
    # A card is lost: published once, its problem logged once.
    fake.gpus = (dataclasses.replace(fake.gpus[0], lost=True), *fake.gpus[1:])
    assert await a.step()
    assert await a.step()
    assert len(api.patches) == 2
    published = orjson.loads(api.patches[-1]["metadata"]["annotations"][keys.GPU_INVENTORY])
    assert [c["healthy"] for c in published] == [False] + [True] * 7
    assert published[0]["uuid"] == fake.gpus[0].uuid  # identity kept from the last read
    events = [r["event"] for r in records(out)]
    assert events.count("card unhealthy") == 1
    assert events.count("inventory published") == 2


async def test_a_node_that_already_has_the_inventory_is_not_patched() -> None:
    value = annotation_value(read_inventory(fake_nvml()))
    api, out = FakeApi({keys.GPU_INVENTORY: value, "other": "kept"}), io.StringIO()
    assert await agent(api, fake_nvml(), out).step()
    assert api.patches == []
    assert "inventory current" in [r["event"] for r in records(out)]


@pytest.mark.parametrize(
    ("fail", "event", "hint"),
    [
        (ApiError("PATCH", "/api/v1/nodes/x", 403, "{}"), "api request failed", "ServiceAccount"),
        (OSError("connection refused"), "api unreachable", ""),
    ],
)
async def test_api_errors_are_logged_and_the_next_step_recovers(
    fail: Exception, event: str, hint: str
) -> None:
    api, out = FakeApi(), io.StringIO()
    a = agent(api, fake_nvml(), out)
    api.fail = fail
    assert not await a.step()
    record = next(r for r in records(out) if r["event"] == event)
    assert record["level"] == "error" and record["node"] == NODE
    assert hint in record.get("hint", "")
    assert await a.step()
    assert api.annotation() is not None


async def test_missing_node_says_what_node_name_must_be() -> None:
    api, out = FakeApi(), io.StringIO()
    api.nodes = {}
    assert not await agent(api, fake_nvml(), out).step()
    record = next(r for r in records(out) if r["event"] == "api request failed")
    assert "spec.nodeName" in record["hint"]


async def test_nvml_failure_publishes_nothing() -> None:
    api, out = FakeApi(), io.StringIO()
    assert not await agent(api, fake_nvml("no_gpus"), out).step()
    assert api.patches == []
    record = next(r for r in records(out) if r["event"] == "nvml read failed")
    assert "no GPU" in record["error"]


async def test_once_exit_codes() -> None:
    ok = await agent(FakeApi(), fake_nvml(), io.StringIO(), once=True).run(asyncio.Event())
    api = FakeApi()
    failed = await agent(api, fake_nvml("no_library"), io.StringIO(), once=True).run(
        asyncio.Event()
    )
    assert (ok, failed) == (0, 1)
    assert api.closed == 0  # never connected: NVML failed first


async def test_the_loop_retries_with_backoff_and_stops_on_request() -> None:
    """Failures do not end the loop (no crash loop); stop ends it with 0."""
    api, out = FakeApi(), io.StringIO()
    api.fail = OSError("server away")
    a = agent(api, fake_nvml(), out, interval=0.01)
    stop = asyncio.Event()
    api.after_patch = stop.set
    assert await asyncio.wait_for(a.run(stop), timeout=30) == 0
    assert api.annotation() is not None and api.closed == 1
    events = [r["event"] for r in records(out)]
    assert events[:2] == ["api unreachable", "retrying"]


def test_load_nvml_default_and_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert load_nvml().__name__ == "pynvml"  # nvidia-ml-py is a dependency
    fake = load_nvml({ENV: "gpusched.agent.fakes.dgx_h100"})
    assert fake.__name__ == "gpusched.agent.fakes.dgx_h100"
    with pytest.raises(NvmlLoadError, match=f"{ENV}='no.such.module'.*for tests only"):
        load_nvml({ENV: "no.such.module"})


def test_cli_needs_a_node_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main(["agent", "--once"]) == 2
    assert "pass --node-name or set NODE_NAME" in capsys.readouterr().err


def test_cli_rejects_bad_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["agent", "--interval", "0"])
    assert caught.value.code == 2
    assert "--interval" in capsys.readouterr().err
    assert main(["agent", "--node-name", "n", "--log-level", "loud"]) == 2
    assert "unknown log level" in capsys.readouterr().err


def test_cli_without_nvml_module_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(ENV, "no.such.module")
    assert main(["agent", "--node-name", "n", "--once"]) == 1
    assert "nvml unavailable" in capsys.readouterr().out

"""`gpusched agent`: read NVML on an interval, patch this node's gpusched.io/gpu-inventory
when it differs from what the node carries.

Nothing here exits on a transient failure: NVML errors (no library yet, a driver being
reloaded, no GPU visible) and API errors (the server away, a 403 while RBAC is applied) are
logged as JSON lines and retried with capped exponential backoff, so the DaemonSet's pod
stays Running instead of crash-looping. `--once` reads and publishes one time and exits
0 (published or already current) or 1 (with the reason logged), for jobs and tests.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import structlog

from gpusched.agent.inventory import (
    NvmlCard,
    NvmlReadError,
    annotation_value,
    read_inventory,
)
from gpusched.agent.nvml import NvmlLoadError, load_nvml
from gpusched.kube.client import ApiError, Kube
from gpusched.kube.nodes import node_annotation, set_node_annotation
from gpusched.kube.watch import Backoff
from gpusched.model import keys
from gpusched.observability.logging import make_logger

Logger = structlog.typing.FilteringBoundLogger
NODE_NAME_ENV = "NODE_NAME"  # the DaemonSet sets it from the downward API (spec.nodeName)
# Backoff after a failure never waits longer than this, whatever --interval is.
MAX_RETRY_SECONDS = 300.0


@dataclass(frozen=True)
class AgentArgs:
    kubeconfig: str | None = None
    node_name: str | None = None
    interval: float = 60.0
    once: bool = False
    log_level: str = "info"
    sysfs_root: Path = Path("/sys")


def _same_inventory(current: str | None, value: str) -> bool:
    """Equal as JSON, so a node whose annotation was re-serialised is not patched again."""
    if current is None:
        return False
    try:
        return bool(orjson.loads(current) == orjson.loads(value))
    except orjson.JSONDecodeError:
        return False


class Agent:
    """One node's publisher: `step` reads and publishes once; `run` repeats it."""

    def __init__(
        self,
        args: AgentArgs,
        node: str,
        nvml: Any,
        log: Logger,
        connect: Callable[[str | None], Awaitable[Kube]] = Kube.connect,
    ) -> None:
        self.args = args
        self.node = node
        self.nvml = nvml
        self.log = log.bind(node=node)
        self.connect = connect
        self.kube: Kube | None = None
        self.previous: list[NvmlCard] = []
        self.reported: dict[int, tuple[str, ...]] = {}
        self.published = ""  # the value last written or found current

    async def close(self) -> None:
        if self.kube is not None:
            await self.kube.close()
            self.kube = None

    def _report_cards(self, cards: list[NvmlCard]) -> None:
        """Each card's problems once per change (the annotation carries only healthy)."""
        for card in cards:
            before = self.reported.get(card.index, ())
            if card.problems == before:
                continue
            if card.problems:
                self.log.warning(
                    "card unhealthy", index=card.index, uuid=card.uuid, problems=card.problems
                )
            else:
                self.log.info("card healthy again", index=card.index, uuid=card.uuid)
            self.reported[card.index] = card.problems

    async def step(self) -> bool:
        """Read NVML and publish when needed; False after a failure (logged)."""
        try:
            cards = await asyncio.to_thread(
                read_inventory, self.nvml, sysfs_root=self.args.sysfs_root, previous=self.previous
            )
        except NvmlReadError as exc:
            self.log.error("nvml read failed", error=str(exc))
            return False
        self.previous = cards
        self._report_cards(cards)
        value = annotation_value(cards)
        try:
            if self.kube is None:
                self.kube = await self.connect(self.args.kubeconfig)
            current = await node_annotation(self.kube, self.node, keys.GPU_INVENTORY)
            if _same_inventory(current, value):
                if value != self.published:
                    self.log.info("inventory current", cards=len(cards))
                self.published = value
                return True
            await set_node_annotation(self.kube, self.node, keys.GPU_INVENTORY, value)
        except ApiError as exc:
            self.log.error("api request failed", error=str(exc), hint=_api_hint(exc, self.node))
            return False
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            self.log.error("api unreachable", error=f"{type(exc).__name__}: {exc}")
            return False
        except Exception as exc:
            # kubernetes_asyncio's kubeconfig loading raises its own types (ConfigException,
            # KeyError on a malformed file): logged and retried like any other failure.
            self.log.error("api client failed", error=f"{type(exc).__name__}: {exc}")
            await self.close()
            return False
        self.published = value
        self.log.info(
            "inventory published",
            cards=len(cards),
            unhealthy=[c.index for c in cards if not c.healthy],
            inventory=value,
        )
        return True

    async def run(self, stop: asyncio.Event) -> int:
        backoff = Backoff(initial=1.0, maximum=max(1.0, min(self.args.interval, MAX_RETRY_SECONDS)))
        try:
            while True:
                ok = await self.step()
                if self.args.once:
                    return 0 if ok else 1
                if ok:
                    backoff.reset()
                    delay = self.args.interval
                else:
                    delay = backoff.next_delay()
                    self.log.info("retrying", in_seconds=round(delay, 1))
                try:
                    await asyncio.wait_for(stop.wait(), timeout=delay)
                    return 0
                except TimeoutError:
                    pass  # the interval passed: read again
        finally:
            await self.close()


def _api_hint(exc: ApiError, node: str) -> str:
    if exc.status == 404:
        return f"no node {node!r}: NODE_NAME must be the pod's spec.nodeName"
    if exc.status in (401, 403):
        return (
            "the agent's ServiceAccount may get and patch nodes (manifests/agent/rbac.yaml),"
            " and the admission policy allows only its own node's gpusched.io/gpu-inventory"
        )
    return ""


async def _serve(agent: Agent) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return await agent.run(stop)


def agent_main(args: AgentArgs) -> int:
    """Exit codes: 0 after a clean stop (or --once published), 1 when --once failed or the
    NVML bindings cannot be imported, 2 for bad arguments."""
    node = (args.node_name or os.environ.get(NODE_NAME_ENV, "")).strip()
    if not node:
        print(
            f"gpusched agent: no node name: pass --node-name or set {NODE_NAME_ENV}"
            " (the DaemonSet sets it from spec.nodeName)",
            file=sys.stderr,
        )
        return 2
    try:
        log = make_logger(level=args.log_level)
    except ValueError as exc:
        print(f"gpusched agent: --log-level: {exc}", file=sys.stderr)
        return 2
    try:
        nvml = load_nvml()
    except NvmlLoadError as exc:
        log.error("nvml unavailable", node=node, error=str(exc))
        return 1
    log.info(
        "agent starting",
        node=node,
        interval_seconds=args.interval,
        once=args.once,
        nvml=getattr(nvml, "__name__", "?"),
    )
    return asyncio.run(_serve(Agent(args, node, nvml, log)))

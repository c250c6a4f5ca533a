"""A stand-in for NVIDIA's dcgm-exporter, for tests and demos on machines without GPUs: an
aiohttp server answering `/metrics` in dcgm-exporter's exposition format, with per-card
values the caller changes at will; a real Prometheus scrapes it.

What it copies from dcgm-exporter (internal/pkg/rendermetrics, etc/default-counters.csv):
the metric names, HELP texts and types of the default counters the scheduler reads; the
label set of a GPU metric, in its order: `gpu` (NVML index), `UUID`, `pci_bus_id`,
`device` (`nvidia<N>`), `modelName`, `Hostname` (the node name dcgm-exporter takes from
$NODE_NAME), then the driver version attribute, and for `DCGM_FI_DEV_XID_ERRORS` the
`err_code` and `err_msg` it adds; integer fields printed as integers and doubles with six
decimals (`%f`), as its template does. A value never set for a card is not exported, as
dcgm-exporter skips DCGM's blank values; the power limit (DCGM_FI_DEV_POWER_MGMT_LIMIT) is
exported only once set, since it is not a default counter.

    exporter = await FakeDcgmExporter().start()
    exporter.add_node("node-a", cards=8, uuids=[...])
    exporter.set("node-a", gpu=2, temp=84)
    prometheus.set_targets([exporter.target])
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Final, Self

from aiohttp import web

from gpusched.devcluster.processes import free_port

# (metric, help, field of _Card, integer?) in dcgm-exporter's default-counters.csv order.
METRICS: Final = (
    ("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", "memory_temp", True),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temp", True),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power", False),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power management limit (in W).", "power_limit", False),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "util", True),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", "xid", True),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "fb_free", True),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "fb_used", True),
)
DRIVER_VERSION: Final = "550.90.07"
# dcgm-exporter's err_msg for the XIDs a test uses (its xidErrCodeToText table).
XID_TEXT: Final = {
    0: "No Error",
    13: "Graphics Engine Exception",
    48: "DBE (Double Bit Error) ECC Error",
    79: "GPU has fallen off the bus",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
}


@dataclass
class _Card:
    index: int
    uuid: str
    model: str
    temp: float | None = 40.0
    memory_temp: float | None = 38.0
    power: float | None = 62.5
    power_limit: float | None = None
    util: float | None = 0.0
    xid: float | None = 0.0
    fb_free: float | None = 81_050.0
    fb_used: float | None = 0.0


@dataclass
class _Node:
    name: str
    cards: dict[int, _Card] = field(default_factory=dict)


class FakeDcgmExporter:
    """`/metrics` for any number of nodes' cards (a real cluster runs one exporter per node;
    one server labelling cards of several hosts is the same series to Prometheus)."""

    def __init__(self, host_label: str = "Hostname") -> None:
        self.host_label = host_label
        self.nodes: dict[str, _Node] = {}
        self.scrapes = 0  # /metrics answered
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._scraped = asyncio.Event()  # set (and replaced) at every /metrics answered

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def add_node(
        self,
        name: str,
        cards: int,
        *,
        uuids: list[str] | None = None,
        model: str = "NVIDIA A100-SXM4-80GB",
    ) -> None:
        node = self.nodes.setdefault(name, _Node(name))
        for i in range(cards):
            uuid = uuids[i] if uuids else f"GPU-{abs(hash((name, i))):032x}"[:40]
            node.cards[i] = _Card(i, uuid, model)

    def set(self, node: str, *, gpu: int | None = None, **values: float | None) -> None:
        """Set readings of one card (`gpu`) or of every card of `node`: temp, memory_temp,
        power, power_limit, util, xid, fb_free, fb_used; None stops exporting that one."""
        known = {m[2] for m in METRICS}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown readings {sorted(unknown)}; known: {sorted(known)}")
        cards = self.nodes[node].cards
        for card in [cards[gpu]] if gpu is not None else list(cards.values()):
            for key, value in values.items():
                setattr(card, key, value)

    def remove(self, node: str) -> None:
        """The node's exporter is gone (its series end)."""
        self.nodes.pop(node, None)

    def render(self) -> str:
        out: list[str] = []
        for metric, help_text, attr, integer in METRICS:
            lines = []
            for node in self.nodes.values():
                for card in node.cards.values():
                    value = getattr(card, attr)
                    if value is None:
                        continue
                    labels = (
                        f'gpu="{card.index}",UUID="{card.uuid}",'
                        f'pci_bus_id="00000000:{0x07 + card.index:02X}:00.0",'
                        f'device="nvidia{card.index}",modelName="{card.model}",'
                        f'{self.host_label}="{node.name}",'
                        f'DCGM_FI_DRIVER_VERSION="{DRIVER_VERSION}"'
                    )
                    if attr == "xid":
                        code = int(value)
                        text = XID_TEXT.get(code, "Unknown Error")
                        labels += f',err_code="{code}",err_msg="{text}"'
                    shown = f"{int(value)}" if integer else f"{value:f}"
                    lines.append(f"{metric}{{{labels}}} {shown}")
            if lines:
                out += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge", *lines]
        return "\n".join(out) + "\n"

    async def _metrics(self, _: web.Request) -> web.Response:
        self.scrapes += 1
        response = web.Response(text=self.render(), content_type="text/plain")
        done, self._scraped = self._scraped, asyncio.Event()
        done.set()
        return response

    async def next_scrape(self) -> None:
        """Until the next /metrics request has been answered (what Prometheus stores then
        is what `set` said before this call)."""
        await self._scraped.wait()

    async def start(self, port: int = 0) -> Self:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = port or free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        """Stop serving (scrapes are refused; Prometheus marks the series stale)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

"""This node's cards as NVML reports them, in the gpusched.io/gpu-inventory form.

One read initialises NVML, asks every card, and shuts NVML down again, so a driver reload or
a GPU reset between reads is seen as it is. The fields (docs/telemetry-agent.md):

* ``model``: the NVML name with spaces as '-', as GPU Feature Discovery writes
  nvidia.com/gpu.product ("NVIDIA A100-SXM4-80GB" -> "NVIDIA-A100-SXM4-80GB"), so a pod's
  gpusched.io/gpu-model matches whether the node's cards come from this agent or from GFD
  (and its short name, `A100M80`, matches too: model/gpu_models.py).
* ``memoryMiB``: total framebuffer / 2^20, as GFD's nvidia.com/gpu.memory.
* ``nvlinkIsland``: connected components of the NVLink graph (cards joined directly, or
  through NVSwitches, which NCCL treats as one switch node); an island id only for a
  component of two cards or more, -1 for a card with no NVLink peer. Components rather than
  all-to-all cliques: NCCL's rings and trees use only neighbouring links, so a collective
  over a connected set stays on NVLink, and an integer per card can only express a
  partition, which overlapping cliques are not.
* ``numa``: the NUMA node nearest the card (`nvidia-smi topo -m`'s "NUMA Affinity"):
  nvmlDeviceGetMemoryAffinity at node scope, else the PCI device's sysfs numa_node, else -1.
  Not nvmlDeviceGetNumaNodeId, which is the node of the GPU's own memory on coherent
  systems ("GPU NUMA ID").
* ``fabricClique``: "<clusterUuid>.<cliqueId>" when the card is registered in a multi-node
  NVLink domain, exactly as GFD forms nvidia.com/gpu.clique; "" otherwise.
* ``powerLimitW``: the enforced power limit (nvmlDeviceGetEnforcedPowerLimit), 0 unknown.
* ``healthy``: false when the card is lost (NVML_ERROR_GPU_IS_LOST or RESET_REQUIRED), a
  row remap failed or is pending (Ampere and later), pages wait for retirement (earlier
  cards), or its NVLink fabric registration is unfinished or failed. XID errors are the
  telemetry path's (DCGM), not this one's.
"""

from __future__ import annotations

import contextlib
import uuid as uuid_module
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

MIB = 1024 * 1024
MAX_MEMORY_MIB = 2**31 - 1  # model/node.py MAX_CARD_MEMORY_MIB
MAX_ISLAND = 126  # model/node.py: nvlinkIsland in [-1, 126]
# NUMA nodes covered by the affinity mask we ask for (16 words of 64 bits).
_NODE_SET_WORDS = 16


@dataclass(frozen=True, slots=True)
class NvmlCard:
    index: int
    uuid: str
    model: str
    memory_mib: int
    nvlink_island: int = -1
    numa: int = -1
    healthy: bool = True
    fabric_clique: str = ""
    power_limit_w: int = 0
    # Why the card is unhealthy (logged by the agent; the annotation carries the verdict).
    problems: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "model": self.model,
            "memoryMiB": self.memory_mib,
            "nvlinkIsland": self.nvlink_island,
            "numa": self.numa,
            "healthy": self.healthy,
            "fabricClique": self.fabric_clique,
            "powerLimitW": self.power_limit_w,
        }


def annotation_value(cards: Sequence[NvmlCard]) -> str:
    """The gpusched.io/gpu-inventory value: a JSON list, cards by index."""
    return orjson.dumps([c.to_json() for c in sorted(cards, key=lambda c: c.index)]).decode()


class NvmlReadError(Exception):
    """NVML could not be read (no library, no driver, no GPU, an unexpected error); the
    message says what and what to check. The agent logs it and tries again later."""


class NoGpusError(NvmlReadError):
    """NVML works but lists no GPU."""


def gfd_product(name: str) -> str:
    """GPU Feature Discovery's nvidia.com/gpu.product for an NVML name (spaces -> '-')."""
    return name.strip().replace(" ", "-")


def pci_bus_id(raw: object) -> str:
    """NVML's busId ("00000000:07:00.0", bytes or str) as sysfs names the device
    ("0000:07:00.0"): a 4-digit domain, lower case."""
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    text = text.split("\x00", 1)[0].strip().lower()
    domain, sep, rest = text.partition(":")
    if sep and len(domain) > 4:
        domain = domain[-4:]
    return f"{domain}{sep}{rest}"


class _LostError(Exception):
    """The card answered GPU_IS_LOST / RESET_REQUIRED."""


class _Reader:
    def __init__(self, nvml: Any, sysfs_root: Path) -> None:
        self.nvml = nvml
        self.sysfs_root = sysfs_root
        self.error = nvml.NVMLError
        self.lost_codes = {
            getattr(nvml, "NVML_ERROR_GPU_IS_LOST", 15),
            getattr(nvml, "NVML_ERROR_RESET_REQUIRED", 16),
        }
        self.unsupported = {
            getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3),
            getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13),
            getattr(nvml, "NVML_ERROR_INVALID_ARGUMENT", 2),
        }

    def required(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """A query the inventory cannot do without: lost -> _LostError, any other error fails
        the whole read (a partial inventory would publish wrong cards)."""
        try:
            return fn(*args)
        except self.error as exc:
            if exc.value in self.lost_codes:
                raise _LostError(str(exc)) from exc
            raise NvmlReadError(f"{what}: {exc} (NVML error {exc.value})") from exc

    def optional(self, name: str, *args: Any) -> Any:
        """A query some cards or drivers do not answer: None when unsupported (or missing
        from older bindings); lost -> _LostError; other errors are read as unknown too, since
        one field is not worth failing the whole inventory."""
        fn = getattr(self.nvml, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self.error as exc:
            if exc.value in self.lost_codes:
                raise _LostError(str(exc)) from exc
            return None


def _numa(reader: _Reader, handle: Any, bus: str) -> int:
    scope = getattr(reader.nvml, "NVML_AFFINITY_SCOPE_NODE", 0)
    words = reader.optional("nvmlDeviceGetMemoryAffinity", handle, _NODE_SET_WORDS, scope)
    if words is not None:
        for w, raw in enumerate(words):
            word = int(raw)
            if word:
                # The lowest node of the mask: a card is near one node on the platforms we
                # know; several would mean equally near, and any of them is right.
                return w * 64 + (word & -word).bit_length() - 1
    try:
        text = (reader.sysfs_root / "bus/pci/devices" / bus / "numa_node").read_text()
        return max(int(text.strip()), -1)
    except (OSError, ValueError):
        return -1


def _fabric(reader: _Reader, handle: Any) -> tuple[str, str]:
    """(clique, problem) from the fabric registration: the clique as GFD labels it
    (go-nvlib's IsFabricAttached: state COMPLETED, status SUCCESS, a non-zero cluster
    UUID), and a problem when the registration is unfinished or failed."""
    nvml = reader.nvml
    info_class = getattr(nvml, "c_nvmlGpuFabricInfoV_t", None)
    info = None
    if info_class is not None:
        info = info_class()
        if reader.optional("nvmlDeviceGetGpuFabricInfoV", handle, info) is None:
            info = None
    if info is None:
        legacy = getattr(nvml, "c_nvmlGpuFabricInfo_t", None)
        if legacy is None:
            return "", ""
        info = legacy()
        if reader.optional("nvmlDeviceGetGpuFabricInfo", handle, info) is None:
            return "", ""
    state = int(info.state)
    completed = getattr(nvml, "NVML_GPU_FABRIC_STATE_COMPLETED", 3)
    if state == getattr(nvml, "NVML_GPU_FABRIC_STATE_NOT_SUPPORTED", 0):
        return "", ""
    if state != completed:
        return (
            "",
            f"NVLink fabric registration not finished (state {state}):"
            " is the fabric manager running?",
        )
    if int(info.status) != getattr(nvml, "NVML_SUCCESS", 0):
        return "", f"NVLink fabric registration failed (NVML status {int(info.status)})"
    raw = bytes(info.clusterUuid)
    if not any(raw):
        return "", ""
    return f"{uuid_module.UUID(bytes=raw[:16])}.{int(info.cliqueId)}", ""


def _health(reader: _Reader, handle: Any) -> list[str]:
    rows = reader.optional("nvmlDeviceGetRemappedRows", handle)
    if rows is not None:
        _corrected, _uncorrected, pending, failed = (int(v) for v in rows)
        problems = []
        if failed:
            problems.append("row remapping failed: the card's memory cannot be repaired")
        if pending:
            problems.append("row remapping pending: reset the GPU to apply it")
        return problems
    pending_pages = reader.optional("nvmlDeviceGetRetiredPagesPendingStatus", handle)
    if pending_pages is not None and int(pending_pages) == getattr(
        reader.nvml, "NVML_FEATURE_ENABLED", 1
    ):
        return ["pages pending retirement: reset the GPU or reboot to retire them"]
    return []


class _Islands:
    """Union-find over the cards plus one node standing for every NVSwitch."""

    def __init__(self, count: int) -> None:
        self.parent = list(range(count + 1))
        self.switch = count

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def ids(self, cards: Sequence[int]) -> dict[int, int]:
        """Island ids, numbered from 0 by each component's lowest card; -1 for a card
        alone (or, past MAX_ISLAND components, for the rest)."""
        members: dict[int, list[int]] = {}
        for card in cards:
            members.setdefault(self.find(card), []).append(card)
        out = dict.fromkeys(cards, -1)
        next_id = 0
        for group in sorted(members.values(), key=min):
            if len(group) < 2 or next_id > MAX_ISLAND:
                continue
            for card in group:
                out[card] = next_id
            next_id += 1
        return out


def _links(reader: _Reader, count: int, handles: dict[int, Any], buses: dict[int, str]) -> _Islands:
    nvml = reader.nvml
    islands = _Islands(count)
    by_bus = {bus: index for index, bus in buses.items()}
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    gpu_type = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_GPU", 0)
    npu_type = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_IBMNPU", 1)
    max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 36))
    for index, handle in handles.items():
        for link in range(max_links):
            state = reader.optional("nvmlDeviceGetNvLinkState", handle, link)
            if state is None or int(state) != enabled:
                continue
            remote_type = reader.optional("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
            if remote_type is not None and int(remote_type) == npu_type:
                continue  # a POWER9 CPU's NVLink: not a path to another card
            remote = reader.optional("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            peer = by_bus.get(pci_bus_id(remote.busId)) if remote is not None else None
            if peer is not None and (remote_type is None or int(remote_type) == gpu_type):
                islands.union(index, peer)
            elif remote_type is None or int(remote_type) != gpu_type:
                # An NVSwitch, or a far end NVML cannot name: NCCL takes an unidentified
                # NVLink for a switch it cannot see (a VM, or a GB200's switch trays).
                islands.union(index, islands.switch)
    return islands


def _lost_card(index: int, previous: NvmlCard | None, reason: str) -> NvmlCard:
    problem = f"GPU is lost ({reason}): reset the GPU or reboot the node"
    if previous is None:
        return NvmlCard(index, "", "", 0, healthy=False, problems=(problem,))
    return replace(previous, healthy=False, problems=(problem,))


def read_inventory(
    nvml: Any,
    *,
    sysfs_root: Path = Path("/sys"),
    previous: Sequence[NvmlCard] = (),
) -> list[NvmlCard]:
    """Every card NVML lists, by index. A card that is lost keeps its `previous` identity
    (uuid, model, memory, ...) and is marked unhealthy. Raises NvmlReadError (NoGpusError
    when NVML lists none)."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlReadError(_init_message(nvml, exc)) from exc
    try:
        return _read(_Reader(nvml, sysfs_root), {c.index: c for c in previous})
    finally:
        # A failed shutdown leaves nothing to undo: the next read initialises again.
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def _init_message(nvml: Any, exc: Any) -> str:
    value = exc.value
    if value == getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", 12):
        return (
            "NVML library (libnvidia-ml.so.1) not found: run the agent with the NVIDIA"
            " container runtime (runtimeClassName nvidia, NVIDIA_DRIVER_CAPABILITIES=utility)"
            " on a node with the NVIDIA driver installed"
        )
    if value == getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", 9):
        return "NVML: the NVIDIA driver is not loaded on this node"
    if value == getattr(nvml, "NVML_ERROR_NO_PERMISSION", 4):
        return "NVML: no permission to initialise (is /dev/nvidiactl reachable?)"
    return f"NVML initialisation failed: {exc} (NVML error {value})"


def _read(reader: _Reader, previous: dict[int, NvmlCard]) -> list[NvmlCard]:
    nvml = reader.nvml
    count = int(reader.required("nvmlDeviceGetCount", nvml.nvmlDeviceGetCount))
    if count <= 0:
        raise NoGpusError(
            "NVML lists no GPU: on a GPU node, give the agent's container the cards"
            " (NVIDIA_VISIBLE_DEVICES=all with the NVIDIA container runtime); the"
            " annotation is left as it is"
        )
    cards: dict[int, NvmlCard] = {}
    handles: dict[int, Any] = {}
    buses: dict[int, str] = {}
    for index in range(count):
        try:
            handle = reader.required(
                f"card {index}: nvmlDeviceGetHandleByIndex", nvml.nvmlDeviceGetHandleByIndex, index
            )
            name = reader.required(f"card {index}: name", nvml.nvmlDeviceGetName, handle)
            uuid = reader.required(f"card {index}: UUID", nvml.nvmlDeviceGetUUID, handle)
            memory = reader.required(f"card {index}: memory", nvml.nvmlDeviceGetMemoryInfo, handle)
            pci = reader.required(f"card {index}: PCI info", nvml.nvmlDeviceGetPciInfo, handle)
        except _LostError as exc:
            cards[index] = _lost_card(index, previous.get(index), str(exc))
            continue
        handles[index] = handle
        buses[index] = pci_bus_id(pci.busId)
        cards[index] = NvmlCard(
            index=index,
            uuid=str(uuid),
            model=gfd_product(str(name)),
            memory_mib=min(int(memory.total) // MIB, MAX_MEMORY_MIB),
        )
    islands = _links_tolerant(reader, count, handles, buses, cards, previous)
    island_of = islands.ids(sorted(handles))
    for index, handle in handles.items():
        card = cards[index]
        if not card.healthy:  # lost while its links were read
            continue
        try:
            problems = _health(reader, handle)
            clique, fabric_problem = _fabric(reader, handle)
            if fabric_problem:
                problems.append(fabric_problem)
            limit = reader.optional("nvmlDeviceGetEnforcedPowerLimit", handle)
            cards[index] = replace(
                card,
                nvlink_island=island_of[index],
                numa=_numa(reader, handle, buses[index]),
                fabric_clique=clique,
                power_limit_w=round(int(limit) / 1000) if limit is not None else 0,
                healthy=not problems,
                problems=tuple(problems),
            )
        except _LostError as exc:
            cards[index] = _lost_card(index, previous.get(index) or card, str(exc))
    return [cards[i] for i in range(count)]


def _links_tolerant(
    reader: _Reader,
    count: int,
    handles: dict[int, Any],
    buses: dict[int, str],
    cards: dict[int, NvmlCard],
    previous: dict[int, NvmlCard],
) -> _Islands:
    """The NVLink graph; a card lost meanwhile is marked and the graph read without it."""
    while True:
        try:
            return _links(reader, count, handles, buses)
        except _LostError as exc:
            gone = []
            for index in list(handles):
                try:
                    reader.required("probe", reader.nvml.nvmlDeviceGetUUID, handles[index])
                except _LostError:
                    gone.append(index)
            if not gone:
                raise NvmlReadError(f"NVLink query: {exc}, yet every card answers") from exc
            for index in gone:
                cards[index] = _lost_card(index, previous.get(index) or cards[index], str(exc))
                del handles[index]
                del buses[index]

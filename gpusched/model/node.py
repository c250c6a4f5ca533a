"""The scheduler's view of a node: allocatable resources, placement labels and its cards.

Parsed once per node event from the Kubernetes object (a dict, as decoded from the watch);
the hot path reads the snapshot's columns, never these objects.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gpusched.model import keys
from gpusched.model.quantity import QuantityError, to_int, to_milli

FULL_CARD_MILLI = 1000


DRA_GPU_SOURCE = "dra"  # NodeModel.gpu_source when the cards come from ResourceSlices
GFD_GPU_SOURCE = "gfd"  # ... from GPU Feature Discovery's labels
NO_GPU_SOURCE = "none"


@dataclass(frozen=True, slots=True)
class Card:
    index: int
    model: str
    memory_mib: int
    nvlink_island: int = -1  # -1: the node did not say which cards share an NVLink island
    numa: int = -1
    healthy: bool = True
    uuid: str = ""
    # The card's multi-node NVLink domain as GPU Feature Discovery's nvidia.com/gpu.clique
    # label spells it ("<clusterUuid>.<cliqueId>"); "" when the card is in none or the
    # node did not say (gpusched agent writes it, docs/telemetry-agent.md).
    fabric_clique: str = ""
    # The enforced power limit in watts (NVML), what power headroom is measured against;
    # 0 when unknown.
    power_limit_w: int = 0


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class NodeModel:
    name: str
    cpu_milli: int
    memory_bytes: int
    pods: int
    cards: tuple[Card, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    rack: str = ""
    spine: str = ""
    # The NVLink fabric clique (GFD's nvidia.com/gpu.clique, the whole value: a CliqueId is
    # unique only within its ClusterUUID); "" when the node is in none.
    clique: str = ""
    # Where the card list came from: "inventory" (gpusched agent), "gfd" (labels and
    # allocatable, cards assumed identical), "dra" (the node's ResourceSlices:
    # dra/cards.py), or "none" (a CPU node).
    gpu_source: str = "none"
    # Every other allocatable resource, sorted by name, in base units (extended resources
    # as counts, ephemeral-storage and hugepages-* in bytes): what NodeResourcesFit checks
    # a pod's `PodRequest.other` against.
    other: tuple[tuple[str, int], ...] = ()
    # Problems found while parsing, e.g. a malformed inventory annotation; the node is still
    # used (with the fallback) and the daemon reports each warning once as an Event.
    warnings: tuple[str, ...] = ()
    # status.allocatable["nvidia.com/gpu"], what the device plugin advertises and
    # kube-scheduler counts against; -1 when the node does not advertise it (no device
    # plugin). The daemon's over-commit detector (core/overcommit.py) reads it.
    allocatable_gpus: int = -1

    @property
    def gpu_count(self) -> int:
        return len(self.cards)


@dataclass(frozen=True, slots=True)
class TopologyKeys:
    """Label keys for network tiers: configurable so Kueue/Volcano/Topograph labels work."""

    rack: str = keys.RACK_LABEL
    spine: str = keys.SPINE_LABEL
    clique: str = keys.GFD_CLIQUE


# A node's resources as the int64/int32 snapshot columns hold them: no node has more, and a
# pod's request is clamped to the same bound (model/pod.py MAX_REQUEST).
MAX_NODE_RESOURCE = 2**62
MAX_NODE_PODS = 2**31 - 1


def _quantity(
    res: Mapping[str, Any], name: str, parse: Any, default: int, hi: int = MAX_NODE_RESOURCE
) -> tuple[int, str]:
    raw = res.get(name)
    if raw is None:
        return default, ""
    where = f"status.allocatable[{name!r}]"
    try:
        value = int(parse(raw))
    except QuantityError as exc:
        return default, f"{where}: {exc}"
    if not 0 <= value <= hi:
        return default, f"{where}={raw!r} is out of range (0-{hi}); using {default}"
    return value, ""


# Allocatable entries with their own NodeModel field; every other one goes to `other`.
_OWN_RESOURCES = frozenset(("cpu", "memory", "pods", keys.GPU_RESOURCE))
# More allocatable resources than any node advertises; a node listing more is malformed.
MAX_NODE_OTHER_RESOURCES = 256


def _other_allocatable(
    alloc: Mapping[str, Any], warnings: list[str]
) -> tuple[tuple[str, int], ...]:
    """The node's other allocatable resources in base units; a malformed or out-of-range
    quantity is reported and read as 0 (nothing offered: pods asking for it do not fit)."""
    out: list[tuple[str, int]] = []
    for name in alloc:
        if not isinstance(name, str) or name in _OWN_RESOURCES:
            continue
        if len(out) >= MAX_NODE_OTHER_RESOURCES:
            warnings.append(
                f"status.allocatable lists more than {MAX_NODE_OTHER_RESOURCES} resources;"
                " the rest are ignored"
            )
            break
        value, warning = _quantity(alloc, name, to_int, 0)
        if warning:
            warnings.append(warning)
        out.append((name, value))
    return tuple(sorted(out))


def _mapping(
    parent: Mapping[str, Any], key: str, where: str, warnings: list[str]
) -> dict[str, Any]:
    """`parent[key]` when it is a JSON object; anything else is reported and read as empty."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        warnings.append(f"{where}{key} is {type(value).__name__}, not an object; ignored")
        return {}
    return value


def _strings(raw: Mapping[str, Any], where: str, warnings: list[str]) -> dict[str, str]:
    """The string entries of a label or annotation map (the API server allows no others)."""
    out: dict[str, str] = {}
    for k, v in raw.items():
        if isinstance(k, str) and isinstance(v, str):
            out[k] = v
        else:
            warnings.append(f"{where}[{k!r}]={v!r} is not a string; ignored")
    return out


_COUNT = re.compile(r"[0-9]{1,18}")  # a label integer: ASCII digits only ('٣' is not 3)


# Bounds on what a node's own data can make us allocate or store. Far above any real node
# (the scheduler uses at most maxCardsPerNode <= 63 cards; card memory lives in int32
# columns), low enough that `nvidia.com/gpu: 1e8` cannot build 10^8 objects first.
MAX_PARSED_CARDS = 1024
MAX_CARD_MEMORY_MIB = 2**31 - 1
# Above any card's power limit (a GB200 superchip's is under 3 kW).
MAX_CARD_POWER_W = 100_000
# A fabric clique is compared with the nvidia.com/gpu.clique label, so it must be a valid
# label value (at most 63 characters, alphanumerics and '-', '_', '.' inside).
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


def _parse_inventory(raw: object) -> tuple[tuple[Card, ...], str]:
    """Cards from the gpusched.io/gpu-inventory JSON; ("", error) names what is wrong."""
    if not isinstance(raw, str):
        return (), f"annotation {keys.GPU_INVENTORY} must be a string, got {type(raw).__name__}"
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return (), f"annotation {keys.GPU_INVENTORY} is not valid JSON ({exc})"
    if not isinstance(data, list):
        return (), f"annotation {keys.GPU_INVENTORY} must be a JSON list, got {type(data).__name__}"
    if len(data) > MAX_PARSED_CARDS:
        return (
            (),
            f"annotation {keys.GPU_INVENTORY} lists {len(data)} cards (at most {MAX_PARSED_CARDS})",
        )
    cards: list[Card] = []
    seen: set[int] = set()
    for pos, item in enumerate(data):
        where = f"annotation {keys.GPU_INVENTORY}[{pos}]"
        if not isinstance(item, dict):
            return (), f"{where} must be an object"
        index = item.get("index", pos)
        memory = item.get("memoryMiB")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            return (), f"{where}.index={index!r} must be a non-negative integer"
        if index in seen:
            return (), f"{where}.index={index} appears twice"
        seen.add(index)
        if (
            not isinstance(memory, int)
            or isinstance(memory, bool)
            or not 0 <= memory <= MAX_CARD_MEMORY_MIB
        ):
            return (), f"{where}.memoryMiB={memory!r} must be an integer in [0, 2^31-1]"
        island = item.get("nvlinkIsland", -1)
        numa = item.get("numa", -1)
        healthy = item.get("healthy", True)
        if not isinstance(island, int) or isinstance(island, bool) or not -1 <= island < 127:
            return (), f"{where}.nvlinkIsland={island!r} must be an integer in [-1, 126]"
        if not isinstance(numa, int) or isinstance(numa, bool):
            return (), f"{where}.numa={numa!r} must be an integer"
        if not isinstance(healthy, bool):
            return (), f"{where}.healthy={healthy!r} must be true or false"
        model = item.get("model", "")
        if not isinstance(model, str):
            return (), f"{where}.model={model!r} must be a string"
        clique = item.get("fabricClique", "")
        if not isinstance(clique, str) or not _LABEL_VALUE.fullmatch(clique):
            return (), (
                f"{where}.fabricClique={clique!r} must be a label value like"
                " nvidia.com/gpu.clique's (<clusterUuid>.<cliqueId>, at most 63 characters)"
            )
        power = item.get("powerLimitW", 0)
        if (
            not isinstance(power, int)
            or isinstance(power, bool)
            or not 0 <= power <= MAX_CARD_POWER_W
        ):
            return (
                (),
                f"{where}.powerLimitW={power!r} must be an integer in [0, {MAX_CARD_POWER_W}]",
            )
        cards.append(
            Card(
                index=index,
                model=model,
                memory_mib=memory,
                nvlink_island=island,
                numa=numa,
                healthy=healthy,
                uuid=str(item.get("uuid", "")),
                fabric_clique=clique,
                power_limit_w=power,
            )
        )
    cards.sort(key=lambda c: c.index)
    if [c.index for c in cards] != list(range(len(cards))):
        return (), f"annotation {keys.GPU_INVENTORY}: card indices must be 0..{len(cards) - 1}"
    return tuple(cards), ""


def _gfd_cards(labels: Mapping[str, str], gpus: int) -> tuple[tuple[Card, ...], list[str]]:
    warnings: list[str] = []
    model = labels.get(keys.GFD_PRODUCT, "")
    mem_raw = labels.get(keys.GFD_MEMORY, "0")
    if _COUNT.fullmatch(mem_raw):
        memory = int(mem_raw)
    else:
        warnings.append(f"label {keys.GFD_MEMORY}={mem_raw!r} is not an integer MiB; using 0")
        memory = 0
    if not 0 <= memory <= MAX_CARD_MEMORY_MIB:
        warnings.append(f"label {keys.GFD_MEMORY}={mem_raw!r} is out of range; using 0")
        memory = 0
    if memory == 0:
        warnings.append("GPU memory unknown: pods asking for GPU memory will not fit here")
    return tuple(Card(index=i, model=model, memory_mib=memory) for i in range(gpus)), warnings


def _inventory_clique(cards: tuple[Card, ...]) -> str:
    """The node's fabric clique from `gpusched agent`'s inventory when GPU Feature Discovery
    does not label it: the clique all its cards share ("" when they do not all share one:
    GFD leaves the label off such a node too)."""
    cliques = {c.fabric_clique for c in cards}
    return cliques.pop() if len(cliques) == 1 else ""


def node_from_k8s(obj: object, topo: TopologyKeys | None = None) -> NodeModel:
    """Parse a Kubernetes Node. Never raises on bad data: the node is kept with a fallback
    and the problems are listed in `warnings` (an unusable node would lose capacity)."""
    topo = topo or TopologyKeys()
    warnings: list[str] = []
    if not isinstance(obj, Mapping):
        warnings.append(f"the node is {type(obj).__name__}, not an object")
        obj = {}
    meta = _mapping(obj, "metadata", "", warnings)
    spec = _mapping(obj, "spec", "", warnings)
    status = _mapping(obj, "status", "", warnings)
    labels = _strings(_mapping(meta, "labels", "metadata.", warnings), "metadata.labels", warnings)
    annotations = _mapping(meta, "annotations", "metadata.", warnings)
    alloc = _mapping(status, "allocatable", "status.", warnings) or _mapping(
        status, "capacity", "status.", warnings
    )

    cpu, w1 = _quantity(alloc, "cpu", to_milli, 0)
    mem, w2 = _quantity(alloc, "memory", to_int, 0)
    pods, w3 = _quantity(alloc, "pods", to_int, 110, MAX_NODE_PODS)
    gpus, w4 = _quantity(alloc, keys.GPU_RESOURCE, to_int, -1)
    warnings += [w for w in (w1, w2, w3, w4) if w]
    other = _other_allocatable(alloc, warnings)

    cards: tuple[Card, ...] = ()
    source = "none"
    if keys.GPU_INVENTORY in annotations:  # a null value too: said, not taken as absent
        raw_inv = annotations[keys.GPU_INVENTORY]
        cards, err = _parse_inventory(raw_inv)
        if err:
            warnings.append(err + "; falling back to GPU Feature Discovery labels")
        else:
            source = "inventory"
    if source == "none":
        count = gpus
        if count < 0:
            raw_count = labels.get(keys.GFD_COUNT, "0")
            if _COUNT.fullmatch(raw_count):
                count = int(raw_count)
            else:
                warnings.append(f"label {keys.GFD_COUNT}={raw_count!r} is not an integer")
                count = 0
        if count > MAX_PARSED_CARDS:
            warnings.append(
                f"{count} GPUs advertised, more than any node has (at most"
                f" {MAX_PARSED_CARDS}); the node's GPUs are not used"
            )
        elif count > 0:
            cards, gfd_warnings = _gfd_cards(labels, count)
            warnings += gfd_warnings
            source = GFD_GPU_SOURCE
    if source == "inventory" and gpus >= 0 and gpus < len(cards):
        # The device plugin advertises fewer cards than the inventory lists: the kubelet
        # admits only `gpus`, so the extra cards must not be offered.
        warnings.append(
            f"inventory lists {len(cards)} cards but allocatable {keys.GPU_RESOURCE} is {gpus}; "
            f"cards {gpus}..{len(cards) - 1} treated as unavailable"
        )
        cards = tuple(c if c.index < gpus else dataclasses.replace(c, healthy=False) for c in cards)

    raw_taints = spec.get("taints") or []
    if not isinstance(raw_taints, list):
        warnings.append(f"spec.taints is {type(raw_taints).__name__}, not a list; ignored")
        raw_taints = []
    taints = tuple(
        Taint(str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
        for t in raw_taints
        if isinstance(t, dict)
    )
    return NodeModel(
        name=str(meta.get("name", "")),
        cpu_milli=cpu,
        memory_bytes=mem,
        pods=pods,
        cards=cards,
        labels=labels,
        taints=taints,
        unschedulable=bool(spec.get("unschedulable", False)),
        rack=labels.get(topo.rack, ""),
        spine=labels.get(topo.spine, ""),
        clique=labels.get(topo.clique, "") or _inventory_clique(cards),
        gpu_source=source,
        other=other,
        warnings=tuple(warnings),
        allocatable_gpus=gpus,
    )

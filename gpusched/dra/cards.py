"""Where DRA devices meet gpusched's per-card model: the full GPUs a node's ResourceSlices
publish become the node's snapshot cards, a pod's GPU claims become the GPU request the
card plugins (GPUFit, GPUFragmentation, NVLink scoring) place, and an allocated claim's
devices become the card shares the cache charges. One placement model then serves pods
that ask through annotations and pods that ask through claims.

Cards: the devices of NVIDIA's DRA driver (`gpu.nvidia.com`) with `type: gpu`, in slices
local to the node (spec.nodeName), newest pool generation only, ordered by the `index` or
`minor` attribute when the driver publishes one, else by the number in the device name
(gpu-0, gpu-1, ... gpu-10). The card's model is `productName` in GPU Feature Discovery's
label form ("NVIDIA H100 80GB HBM3" -> "NVIDIA-H100-80GB-HBM3", what
`nvidia.com/gpu.product` says on device-plugin nodes), its memory the `memory` capacity.
NVIDIA's driver publishes no NVLink island per GPU, so the layout is unknown (-1), as on
GFD-only nodes. MIG devices and other drivers' devices are not cards: the allocator alone
places them.

Demand: a request is card-shaped when it names one of the card classes (by default the
`gpu.nvidia.com` DeviceClass NVIDIA's chart ships, which selects `type == 'gpu'`) through
`exactly` with ExactCount and no admin access: `count` whole cards, or with a `memory`
capacity request, a share of one card of that much memory (consumable capacity). Anything
else (firstAvailable, All, MIG classes, other drivers) is placed by the allocator alone.
The allocator stays the authority either way: the card plugins' choice only orders the
devices it tries first.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

from gpusched.dra.allocator import newest_slices
from gpusched.model.dra import (
    AllocationMode,
    AttributeKind,
    Device,
    ResourceClaim,
    ResourceSlice,
)
from gpusched.model.node import (
    DRA_GPU_SOURCE,
    FULL_CARD_MILLI,
    GFD_GPU_SOURCE,
    NO_GPU_SOURCE,
    Card,
    NodeModel,
)

GPU_DRIVER = "gpu.nvidia.com"
# The DeviceClasses whose requests are card-shaped unless configured otherwise.
CARD_CLASSES = ("gpu.nvidia.com",)
MIB = Decimal(1024 * 1024)
DeviceId = tuple[str, str, str]  # (driver, pool, device)

_NUMBER = re.compile(r"(\d+)")


@dataclass(frozen=True, slots=True)
class CardMap:
    """A node's cards from its slices: `devices[i]` is card i."""

    cards: tuple[Card, ...] = ()
    devices: tuple[DeviceId, ...] = ()
    # Each card device's memory capacity in bytes and whether it may be shared.
    memory: tuple[Decimal, ...] = ()
    shareable: tuple[bool, ...] = ()

    def card_of(self, device: DeviceId) -> int:
        try:
            return self.devices.index(device)
        except ValueError:
            return -1


NO_CARDS = CardMap()


def _attr(device: Device, driver: str, name: str) -> object:
    a = device.attributes.get(f"{driver}/{name}")
    return None if a is None else a.value


def is_card(driver: str, device: Device) -> bool:
    return driver == GPU_DRIVER and _attr(device, driver, "type") == "gpu"


def _order(driver: str, device: Device) -> tuple[int, int, str]:
    for name in ("index", "minor"):
        a = device.attributes.get(f"{driver}/{name}")
        if a is not None and a.kind is AttributeKind.INT and isinstance(a.value, int):
            return (0, a.value, device.name)
    numbers = _NUMBER.findall(device.name)
    return (1, int(numbers[-1]) if numbers else 0, device.name)


def product_model(product: str) -> str:
    """A productName in GPU Feature Discovery's label form (spaces become dashes)."""
    return "-".join(product.split())


def card_map(node: str, slices: Iterable[ResourceSlice], max_cards: int = 63) -> CardMap:
    """The node's cards from the slices local to it (at most `max_cards`, the snapshot's
    width; the rest are left to the allocator alone)."""
    found: list[tuple[tuple[int, int, str], str, str, Device]] = []
    kept = (s for s in slices if not s.errors)
    newest = (s for group in newest_slices(kept).values() for s in group)
    for s in newest:
        if s.node_name != node or s.per_device_node_selection:
            continue
        for d in s.devices:
            if is_card(s.driver, d):
                found.append((_order(s.driver, d), s.driver, s.pool, d))
    found.sort(key=lambda f: (f[0], f[2]))
    cards: list[Card] = []
    devices: list[DeviceId] = []
    memory: list[Decimal] = []
    shareable: list[bool] = []
    for i, (_, driver, pool, d) in enumerate(found[:max_cards]):
        mem = d.capacity.get(f"{driver}/memory")
        total = mem.value if mem is not None else Decimal(0)
        numa = _attr(d, "resource.kubernetes.io", "numaNode")
        cards.append(
            Card(
                index=i,
                model=product_model(str(_attr(d, driver, "productName") or "")),
                memory_mib=int(total // MIB),
                numa=numa if isinstance(numa, int) and not isinstance(numa, bool) else -1,
                uuid=str(_attr(d, driver, "uuid") or ""),
                healthy=not any(t.effect in ("NoSchedule", "NoExecute") for t in d.taints),
            )
        )
        devices.append((driver, pool, d.name))
        memory.append(total)
        shareable.append(d.allow_multiple_allocations)
    return CardMap(tuple(cards), tuple(devices), tuple(memory), tuple(shareable))


# -- demand ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CardDemand:
    """The GPU request a pod's card-shaped claims add up to."""

    cards: int = 0  # whole cards
    mem_mib: int = 0  # a share of one card, by memory (consumable capacity)

    @property
    def empty(self) -> bool:
        return self.cards == 0 and self.mem_mib == 0


def card_demand(claims: Sequence[ResourceClaim], card_classes: Collection[str]) -> CardDemand:
    """What the card plugins should place for these (unallocated) claims: whole cards, or
    one share; an empty demand when nothing is card-shaped or the shapes mix (whole cards
    and shares, two shares: one share of one card is what the card model holds)."""
    cards = 0
    shares: list[int] = []
    for claim in claims:
        for request in claim.requests:
            if request.first_available or len(request.alternatives) != 1:
                continue
            sub = request.alternatives[0]
            if (
                sub.device_class not in card_classes
                or sub.mode is not AllocationMode.EXACT_COUNT
                or sub.admin_access
            ):
                continue
            memory = next(
                (v for k, v in sub.capacity_requests.items() if k.rsplit("/", 1)[-1] == "memory"),
                None,
            )
            if memory is None:
                cards += sub.count
            else:
                mib = int((memory / MIB).to_integral_value(rounding=ROUND_CEILING))
                shares.extend([mib] * sub.count)
    if shares and (cards or len(shares) > 1):
        return CardDemand()
    return CardDemand(cards=cards, mem_mib=shares[0] if shares else 0)


# -- charges ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CardCharge:
    """What allocated devices hold of a node's cards: card i holds milli[i] / mem_mib[i]."""

    cards: tuple[int, ...]
    milli: tuple[int, ...]
    mem_mib: tuple[int, ...]


def charge_of(
    results: Iterable[tuple[DeviceId, Mapping[str, Decimal]]], cards: CardMap
) -> CardCharge:
    """The card shares held by allocation results ((device, consumed capacity) pairs): a
    whole card for a device allocated outright, the consumed memory's share of the card
    for a shared (consumable-capacity) allocation. Results on non-card devices hold no
    card. Shares of one card add up."""
    held: dict[int, tuple[int, int]] = {}
    for device, consumed in results:
        i = cards.card_of(device)
        if i < 0:
            continue
        total_mib = cards.cards[i].memory_mib
        memory = next((v for k, v in consumed.items() if k.rsplit("/", 1)[-1] == "memory"), None)
        if memory is None or not cards.shareable[i] or total_mib <= 0:
            milli, mib = FULL_CARD_MILLI, total_mib
        else:
            mib = min(total_mib, int((memory / MIB).to_integral_value(rounding=ROUND_CEILING)))
            milli = min(FULL_CARD_MILLI, -(-mib * FULL_CARD_MILLI // total_mib))
        m0, b0 = held.get(i, (0, 0))
        held[i] = (m0 + milli, b0 + mib)
    order = sorted(held)
    return CardCharge(
        tuple(order), tuple(held[i][0] for i in order), tuple(held[i][1] for i in order)
    )


def with_dra_cards(node: NodeModel, slices: Iterable[ResourceSlice], max_cards: int) -> NodeModel:
    """The node with its cards from its slices, when it has no other source of cards (a
    node the device plugin or `gpusched agent` describes keeps those: one owner per card).
    GPU Feature Discovery's labels alone are no owner: they describe the hardware on DRA
    nodes too (the GPU Operator runs GFD whether or not the device plugin runs), so a
    node they describe without the device plugin's allocatable `nvidia.com/gpu` takes its
    cards from its slices when it has any. Idempotent: a node whose cards came from slices
    is derived again from the slices."""
    labelled_only = node.gpu_source == GFD_GPU_SOURCE and node.allocatable_gpus < 0
    if node.gpu_source not in (NO_GPU_SOURCE, DRA_GPU_SOURCE) and not labelled_only:
        return node
    found = card_map(node.name, slices, max_cards)
    if not found.cards:
        if node.gpu_source == DRA_GPU_SOURCE:
            return dataclasses.replace(node, cards=(), gpu_source=NO_GPU_SOURCE)
        return node
    return dataclasses.replace(node, cards=found.cards, gpu_source=DRA_GPU_SOURCE)

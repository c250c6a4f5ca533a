"""The cards allocated DRA devices hold, charged in the cache so the card plugins see them.

The allocator (gpusched/dra/allocator.py) decides from the claims themselves which devices
are free; the card columns must agree with it, or GPUFit would offer a card a claim holds
and GPUFragmentation would price a node as emptier than it is. So every allocated claim
(any scheduler's, from status.allocation, and ours in flight: DraPort.allocated_claims)
charges the cards its devices map to (dra/cards.py): a whole card for a device allocated
outright, the consumed memory's share for a shared (consumable-capacity) device. A claim
holds its devices however many pods share it, so the charge is the claim's, not a pod's.

`sync()` runs before every scheduling cycle (core/schedule_one.py); it does nothing until
the port's version moves, and then recharges only the claims whose charge changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from gpusched.core.cache.cache import ClusterCache, DeviceCharge
from gpusched.dra.allocator import same_slices
from gpusched.dra.cards import CardMap, DeviceId, card_map, charge_of
from gpusched.framework.dra import DraPort
from gpusched.model.dra import ResourceClaim, ResourceSlice


class DraLedger:
    def __init__(self, cache: ClusterCache, dra: DraPort) -> None:
        self.cache = cache
        self.dra = dra
        self._seen = (-1, -1)  # (port version, snapshot card layout) last synced
        self._slices: tuple[ResourceSlice, ...] = ()
        self._layout = -1
        self._maps: dict[str, CardMap] = {}
        self._where: dict[DeviceId, str] = {}  # card device -> its node
        self.charged: set[str] = set()  # keys charged in the cache
        # claim uid -> (the claim object last charged, its charges by key)
        self._memo: dict[str, tuple[ResourceClaim, dict[str, DeviceCharge]]] = {}

    def card_map(self, node: str) -> CardMap:
        """The node's cards as the last sync saw them (an empty map for a non-DRA node)."""
        return self._maps.get(node, CardMap())

    def sync(self) -> None:
        version = (self.dra.version, self.cache.snapshot.card_layout)
        if version == self._seen:
            return
        self._seen = version
        if self._index_cards():
            self._memo.clear()  # card positions moved: every claim's charge again
        wanted: dict[str, DeviceCharge] = {}
        memo: dict[str, tuple[ResourceClaim, dict[str, DeviceCharge]]] = {}
        for claim in self.dra.allocated_claims():
            seen = self._memo.get(claim.uid)
            # Claims are frozen: the same object holds the same charge.
            charges = seen[1] if seen is not None and seen[0] is claim else self._charges(claim)
            memo[claim.uid] = (claim, charges)
            wanted.update(charges)
        self._memo = memo
        for key in self.charged - wanted.keys():
            self.cache.release_devices(key)
        for key, held in wanted.items():
            self.cache.charge_devices(key, held)
        self.charged = set(wanted)

    def _charges(self, claim: ResourceClaim) -> dict[str, DeviceCharge]:
        """The claim's card charges, one per node its card devices are on."""
        out: dict[str, DeviceCharge] = {}
        if claim.allocation is None:
            return out
        by_node: dict[str, list[tuple[DeviceId, Mapping[str, Decimal]]]] = {}
        for r in claim.allocation.results:
            # Admin access does not hold the device (kube's allocated-device tracking).
            node = None if r.admin_access else self._where.get(r.device_id)
            if node is not None:
                by_node.setdefault(node, []).append((r.device_id, r.consumed_capacity))
        for node, results in by_node.items():
            charge = charge_of(results, self._maps[node])
            if charge.cards:
                out[f"{claim.uid}@{node}"] = DeviceCharge(
                    node, charge.cards, charge.milli, charge.mem_mib
                )
        return out

    def _index_cards(self) -> bool:
        """Which node's card each card device is; again when a slice or a node's cards
        changed (a node that arrives after its slices, a node that becomes DRA). True when
        it was rebuilt."""
        slices = self.dra.slices()
        snap = self.cache.snapshot
        if snap.card_layout == self._layout and same_slices(slices, self._slices):
            return False
        self._slices = slices
        self._layout = snap.card_layout
        self._maps = {}
        self._where = {}
        nodes = {s.node_name for s in slices if s.node_name}
        for node in nodes:
            row = snap.row_of(node)
            if row < 0 or not snap.node_dra_cards[row]:
                continue  # unknown, or its cards come from elsewhere (one owner per card)
            found = card_map(node, self.dra.slices_for_node(node), snap.max_cards)
            self._maps[node] = found
            for device in found.devices:
                self._where[device] = node
        return True

"""The snapshot the cache builds: the framework's read-only columns plus their writers.

Plugins read the columns through `gpusched.framework.snapshot.NodeColumns` (the contract);
only the cache writes them, through this subclass, one row at a time when a node or a pod
changes, never rebuilding per pod.

Used capacity is implicit (allocatable - free), so a node update that changes allocatable
keeps what its pods use. Whatever writes a row's columns calls `touch(row)`: per-row caches
(GPUFit's summary cache) trust the row versions to know what changed. Label and taint sets
are reference-counted (`Interner.acquire` / `release`): a node's update or removal frees the
sets no node uses any more.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpusched.framework.snapshot import (
    MAX_CARDS_LIMIT,
    MAX_OTHER_RESOURCES,
    NO_CARD,
    TELEMETRY_CARD_COLUMNS,
    TOUCH_LOG,
    NodeColumns,
)
from gpusched.model.gpu_models import canonical
from gpusched.model.node import (
    DRA_GPU_SOURCE,
    FULL_CARD_MILLI,
    GFD_GPU_SOURCE,
    MAX_CARD_MEMORY_MIB,
    MAX_NODE_PODS,
    MAX_NODE_RESOURCE,
    NodeModel,
)

# What the card columns hold: int8 island ids, int16 model ids.
MAX_ISLAND = 126
MAX_MODELS = 2**15 - 1


class Snapshot(NodeColumns):
    """The columns plus their writers: what the cache builds and alone changes."""

    def touch(self, row: int) -> None:
        self.touched[self.version % TOUCH_LOG] = row
        self.version += 1
        self.row_version[row] = self.version

    # -- nodes -----------------------------------------------------------------------------

    def upsert_node(self, node: NodeModel) -> int:
        """Add or update a node's row, keeping what its pods already use.

        Most node updates (status heartbeats, condition changes) leave the cards, labels and
        taints as they were; those rows skip the card-column rebuild.
        """
        self._check(node)
        row = self.rows.get(node.name)
        if row is None:
            if not self._free_rows:
                self._alloc(max(64, self.capacity * 2))
            row = self._free_rows.pop()
            self.rows[node.name] = row
            self.names[row] = node.name
            self.membership += 1
            for col in (
                self.node_cpu_alloc,
                self.node_cpu_free,
                self.node_mem_alloc,
                self.node_mem_free,
                self.node_pods_alloc,
                self.node_pods_free,
            ):
                col[row] = 0
            self.node_other_alloc[row] = 0
            self.node_other_free[row] = 0
            old = None
        else:
            old = self.nodes[row]
        self.nodes[row] = node
        if old is None or old.cards != node.cards:
            self._set_cards(row, node)
        # Free = allocatable - used, where used = old allocatable - old free.
        self.node_cpu_free[row] += node.cpu_milli - self.node_cpu_alloc[row]
        self.node_mem_free[row] += node.memory_bytes - self.node_mem_alloc[row]
        self.node_pods_free[row] += node.pods - self.node_pods_alloc[row]
        self.node_cpu_alloc[row] = node.cpu_milli
        self.node_mem_alloc[row] = node.memory_bytes
        self.node_pods_alloc[row] = node.pods
        if node.other or (old is not None and old.other):
            self._set_other(row, node)
        self.cordoned += int(node.unschedulable) - int(self.node_unschedulable[row])
        self.node_unschedulable[row] = node.unschedulable
        dra = node.gpu_source == DRA_GPU_SOURCE
        # Only an inventory says which cards share an NVLink island (-1 there: no NVLink
        # peer); GFD labels and DRA slices do not, so there the layout is unknown.
        self.node_nvlink_unknown[row] = node.gpu_source in (GFD_GPU_SOURCE, DRA_GPU_SOURCE)
        self.dra_nodes += int(dra) - int(self.node_dra_cards[row])
        self.node_dra_cards[row] = dra
        # Label and taint sets are shared and reference-counted; a label set holds only
        # the watched keys, so a label nothing selects on changes nothing here.
        changed = False
        if old is None or old.labels != node.labels:
            changed = self._set_labelset(row, node.labels)
        if old is None or old.taints != node.taints:
            changed = self._set_taintset(row, node.taints) or changed
        if changed:
            self.generation += 1
        if old is None or old.rack != node.rack or old.spine != node.spine:
            self.node_rack[row] = self.racks.id(node.rack) if node.rack else -1
            self.node_spine[row] = self.spines.id(node.spine) if node.spine else -1
        if old is None or old.clique != node.clique:
            self.node_clique[row] = self.cliques.id(node.clique) if node.clique else -1
        self.node_valid[row] = True
        self.touch(row)
        return row

    def _check(self, node: NodeModel) -> None:
        """ValueError, before anything is written, for a node the columns cannot hold: a
        failure half-way would leave a row filed under the name with stale columns."""
        if len(node.cards) > self.max_cards:
            raise ValueError(
                f"node {node.name} has {len(node.cards)} cards, more than maxCardsPerNode"
                f" ({self.max_cards}); raise maxCardsPerNode in the scheduler configuration"
                f" (at most {MAX_CARDS_LIMIT})"
            )
        for what, value, hi in (
            ("cpu", node.cpu_milli, MAX_NODE_RESOURCE),
            ("memory", node.memory_bytes, MAX_NODE_RESOURCE),
            ("pods", node.pods, MAX_NODE_PODS),
        ):
            if not 0 <= value <= hi:
                raise ValueError(f"node {node.name}: {what}={value} is out of range (0-{hi})")
        seen: set[int] = set()
        new_models: set[str] = set()
        for c in node.cards:
            if not 0 <= c.index < self.max_cards or c.index in seen:
                raise ValueError(
                    f"node {node.name}: card index {c.index} is out of range or repeated"
                    f" (0-{self.max_cards - 1}, each once)"
                )
            seen.add(c.index)
            if not 0 <= c.memory_mib <= MAX_CARD_MEMORY_MIB:
                raise ValueError(
                    f"node {node.name}: card {c.index} memoryMiB={c.memory_mib} is out of range"
                )
            if not -1 <= c.nvlink_island <= MAX_ISLAND:
                raise ValueError(
                    f"node {node.name}: card {c.index} nvlinkIsland={c.nvlink_island} is out"
                    f" of range (-1-{MAX_ISLAND})"
                )
            if self.models.find(canonical(c.model)) < 0:
                new_models.add(canonical(c.model))
        fresh = {name for name, _ in node.other if name not in self.other_index}
        if len(self.other_index) + len(fresh) > MAX_OTHER_RESOURCES:
            raise ValueError(
                f"node {node.name}: more than {MAX_OTHER_RESOURCES} distinct extended"
                f" resources seen; {sorted(fresh)[0]!r} not added"
            )
        for name, value in node.other:
            if not 0 <= value <= MAX_NODE_RESOURCE:
                raise ValueError(
                    f"node {node.name}: {name}={value} is out of range (0-{MAX_NODE_RESOURCE})"
                )
        if len(self.models.values) + len(new_models) > MAX_MODELS:
            raise ValueError(
                f"node {node.name}: more than {MAX_MODELS} distinct GPU models seen; model"
                f" {sorted(new_models)[0]!r} not added"
            )

    def other_column_for(self, name: str) -> int:
        """The column of an other resource, added (zero on every row) when new; -1 past
        MAX_OTHER_RESOURCES (nodes are checked before this, in `_check`)."""
        col = self.other_index.get(name)
        if col is not None:
            return col
        if len(self.other_index) >= MAX_OTHER_RESOURCES:
            return -1
        col = len(self.other_index)
        self.other_index[name] = col
        pad = np.zeros((self.capacity, 1), np.int64)
        self.node_other_alloc = np.concatenate([self.node_other_alloc, pad], axis=1)
        self.node_other_free = np.concatenate([self.node_other_free, pad], axis=1)
        return col

    def _set_other(self, row: int, node: NodeModel) -> None:
        """A row's other allocatable resources, keeping what its pods use of each (free =
        allocatable - used); a resource the node no longer lists has allocatable 0."""
        cols = [(self.other_column_for(name), value) for name, value in node.other]
        alloc = np.zeros(len(self.other_index), np.int64)
        for col, value in cols:
            if col >= 0:  # always: _check refused the node past the bound
                alloc[col] = value
        self.node_other_free[row] += alloc - self.node_other_alloc[row]
        self.node_other_alloc[row] = alloc

    def _set_cards(self, row: int, node: NodeModel) -> None:
        """Rewrite a row's card columns, keeping each slot's used share.

        A slot without a card keeps what pods still hold on it as a negative free share
        (free = -used), so a card that disappears while pods hold it and comes back later,
        or the pods leaving in between, never leaves more than a whole card free.
        """
        C = self.max_cards
        had = self.card_model[row] != NO_CARD
        used_milli = np.where(
            had, FULL_CARD_MILLI - self.card_free_milli[row], -self.card_free_milli[row]
        )
        used_mem = np.where(
            had, self.card_total_mem[row] - self.card_free_mem[row], -self.card_free_mem[row]
        )
        model = np.full(C, NO_CARD, np.int16)
        total = np.zeros(C, np.int32)
        healthy = np.zeros(C, np.bool_)
        island = np.full(C, -1, np.int8)
        for c in node.cards:
            # By canonical name: a card published as `NVIDIA-A100-SXM4-80GB` (agent, GFD,
            # DRA) and one published as `A100M80` are one model, so a pod's constraint in
            # either spelling matches both (model/gpu_models.py).
            model[c.index] = self.models.id(canonical(c.model))
            total[c.index] = c.memory_mib
            healthy[c.index] = c.healthy
            island[c.index] = c.nvlink_island
        has = model != NO_CARD
        self.card_model[row] = model
        self.card_total_mem[row] = total
        self.card_listed_healthy[row] = healthy
        # A card telemetry found sick stays out of service through an inventory rewrite
        # (the slot is the NVML index: the same card); its readings do not carry over.
        self.card_healthy[row] = healthy & ~self.card_sick[row]
        self._clear_readings(row)
        self.card_island[row] = island
        self.card_free_milli[row] = np.where(has, FULL_CARD_MILLI - used_milli, -used_milli)
        self.card_free_mem[row] = np.where(has, total - used_mem, -used_mem)
        self.node_card_count[row] = len(node.cards)
        self.card_layout += 1

    def remove_node(self, name: str) -> NodeModel | None:
        row = self.rows.pop(name, None)
        if row is None:
            return None
        node = self.nodes[row]
        self.nodes[row] = None
        self.names[row] = ""
        self.node_valid[row] = False
        self.cordoned -= int(self.node_unschedulable[row])
        self.node_unschedulable[row] = False
        self._set_labelset(row, None)
        self._set_taintset(row, ())
        self.card_model[row] = NO_CARD
        self.dra_nodes -= int(self.node_dra_cards[row])
        self.node_dra_cards[row] = False
        self.node_nvlink_unknown[row] = False
        self.node_clique[row] = -1
        self.card_free_milli[row] = 0
        self.card_free_mem[row] = 0
        self._clear_readings(row)
        self.card_sick[row] = False
        self._free_rows.append(row)
        self.generation += 1
        self.membership += 1
        self.touch(row)
        return node

    # -- pods ------------------------------------------------------------------------------

    def apply(
        self,
        row: int,
        cpu_milli: int,
        memory_bytes: int,
        cards: Sequence[int],
        milli: Sequence[int],
        mem_mib: Sequence[int],
        sign: int = 1,
        other: Sequence[tuple[str, int]] = (),
    ) -> None:
        """Take (sign=1) or give back (sign=-1) a pod's resources on one row.

        `milli[i]`/`mem_mib[i]` are what the pod holds on card `cards[i]`; `other` the pod's
        other resources (PodRequest.other), charged whether or not the node offers them, as
        kube-scheduler's NodeInfo.Requested is.
        """
        self.node_cpu_free[row] -= sign * cpu_milli
        self.node_mem_free[row] -= sign * memory_bytes
        self.node_pods_free[row] -= sign
        for name, amount in other:
            col = self.other_column_for(name)
            if col >= 0:
                self.node_other_free[row, col] -= sign * amount
        for c, m, mm in zip(cards, milli, mem_mib, strict=True):
            self.card_free_milli[row, c] -= sign * m
            self.card_free_mem[row, c] -= sign * mm
        self.touch(row)

    def apply_cards(
        self,
        row: int,
        cards: Sequence[int],
        milli: Sequence[int],
        mem_mib: Sequence[int],
        sign: int = 1,
    ) -> None:
        """Take (sign=1) or give back (sign=-1) card shares that no pod holds: allocated
        DRA devices (core/dra_ledger.py), which count against the cards but not as pods."""
        for c, m, mm in zip(cards, milli, mem_mib, strict=True):
            self.card_free_milli[row, c] -= sign * m
            self.card_free_mem[row, c] -= sign * mm
        self.touch(row)

    # -- telemetry (gpusched/telemetry/ingest.py writes these) --------------------------

    def _clear_readings(self, row: int) -> None:
        self.telemetry_version += 1
        for name in TELEMETRY_CARD_COLUMNS:
            getattr(self, name)[row] = np.nan
        self.card_sampled_at[row] = np.nan
        self.node_temp[row] = np.nan
        self.node_sampled_at[row] = np.nan

    def set_card_reading(self, row: int, card: int, values: Sequence[float], at: float) -> None:
        """One card's readings, in TELEMETRY_CARD_COLUMNS order, sampled at `at`. Readings
        change no row version: nothing caches on them (plugins read them each cycle)."""
        for name, value in zip(TELEMETRY_CARD_COLUMNS, values, strict=True):
            getattr(self, name)[row, card] = value
        self.card_sampled_at[row, card] = at

    def expire_readings(self, before: float) -> None:
        """Clear (NaN) every reading sampled before `before` and recompute each node's
        hottest fresh card; a card never seen stays NaN."""
        self.telemetry_version += 1
        stale = self.card_sampled_at < before  # NaN compares False: never-seen stays as is
        if stale.any():
            for name in TELEMETRY_CARD_COLUMNS:
                getattr(self, name)[stale] = np.nan
        fresh = self.card_sampled_at >= before
        temps = np.where(fresh, self.card_temp, np.nan)
        known = ~np.isnan(temps).all(axis=1)
        self.node_temp[:] = np.nan
        self.node_temp[known] = np.nanmax(temps[known], axis=1)
        at = np.where(fresh, self.card_sampled_at, np.nan)
        seen = fresh.any(axis=1)
        self.node_sampled_at[:] = np.nan
        self.node_sampled_at[seen] = np.nanmax(at[seen], axis=1)

    def set_card_sick(self, row: int, card: int, sick: bool) -> bool:
        """Take a card out of service (or give it back) on telemetry's word; True when
        that changed whether the card may be given out (the row is then touched, so the
        per-row card caches recompute)."""
        self.card_sick[row, card] = sick
        healthy = bool(self.card_listed_healthy[row, card]) and not sick
        if bool(self.card_healthy[row, card]) == healthy:
            return False
        self.card_healthy[row, card] = healthy
        self.touch(row)
        return True

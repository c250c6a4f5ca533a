"""Struct-of-arrays columns of the cluster: what filters and scores read.

One row per node, one slot per card (N rows x C slots). The columns are live: the cache
changes one row when a node or a pod changes, never rebuilding per pod. The scheduling
cycle never awaits between reading them and assuming the pod, so within a cycle they are a
consistent snapshot (the asyncio loop gives the atomicity kube-scheduler gets from a lock).

Used capacity is implicit (allocatable - free), so a node update that changes allocatable
keeps what its pods use. Whatever writes a row's columns calls `touch(row)`: per-row caches
(GPUFit's summary cache) trust the row versions to know what changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gpusched.model.node import FULL_CARD_MILLI, NodeModel, Taint

NO_CARD = -1


class Interner:
    """Stable small ids for hashable values (models, racks, label sets)."""

    __slots__ = ("_ids", "values")

    def __init__(self) -> None:
        self._ids: dict[object, int] = {}
        self.values: list[object] = []

    def id(self, value: object) -> int:
        got = self._ids.get(value)
        if got is None:
            got = len(self.values)
            self._ids[value] = got
            self.values.append(value)
        return got

    def find(self, value: object) -> int:
        return self._ids.get(value, -1)

    def __len__(self) -> int:
        return len(self.values)


class Snapshot:
    def __init__(self, max_cards: int = 8, capacity: int = 64) -> None:
        self.max_cards = max_cards
        self.capacity = 0
        self.rows: dict[str, int] = {}
        self.names: list[str] = []
        self.nodes: list[NodeModel | None] = []
        self._free_rows: list[int] = []
        self.models = Interner()
        self.racks = Interner()
        self.spines = Interner()
        self.labelsets = Interner()  # values: frozenset of label items
        self.taintsets = Interner()  # values: tuple[Taint, ...]
        self._allowed_cache: dict[tuple[str, ...], tuple[int, NDArray[np.bool_]]] = {}
        # Bumped whenever node labels/taints change shape, so plugins can drop their caches.
        self.generation = 0
        # Every change to a row's resources stamps it with a new version, so a plugin that
        # caches per-row results recomputes only the rows changed since it last looked.
        self.version = 0
        self._alloc(capacity)

    # -- storage ---------------------------------------------------------------------------

    def _alloc(self, capacity: int) -> None:
        old = self.capacity
        C = self.max_cards

        def grow(name: str, shape: tuple[int, ...], dtype: type, fill: object) -> None:
            arr: NDArray[Any] = np.full(shape, fill, dtype=dtype)
            if old:
                prev = getattr(self, name)
                arr[: prev.shape[0], ...] = prev
            setattr(self, name, arr)

        grow("card_free_milli", (capacity, C), np.int32, 0)
        grow("card_free_mem", (capacity, C), np.int32, 0)
        grow("card_total_mem", (capacity, C), np.int32, 0)
        grow("card_model", (capacity, C), np.int16, NO_CARD)
        grow("card_healthy", (capacity, C), np.bool_, False)
        grow("card_island", (capacity, C), np.int8, -1)
        grow("node_valid", (capacity,), np.bool_, False)
        grow("node_unschedulable", (capacity,), np.bool_, False)
        grow("node_cpu_free", (capacity,), np.int64, 0)
        grow("node_mem_free", (capacity,), np.int64, 0)
        grow("node_pods_free", (capacity,), np.int32, 0)
        grow("node_cpu_alloc", (capacity,), np.int64, 0)
        grow("node_mem_alloc", (capacity,), np.int64, 0)
        grow("node_pods_alloc", (capacity,), np.int32, 0)
        grow("node_card_count", (capacity,), np.int16, 0)
        grow("node_temp", (capacity,), np.float32, np.nan)
        grow("node_rack", (capacity,), np.int32, -1)
        grow("node_spine", (capacity,), np.int32, -1)
        grow("node_labelset", (capacity,), np.int32, -1)
        grow("node_taintset", (capacity,), np.int32, -1)
        grow("row_version", (capacity,), np.int64, 0)
        self.names.extend([""] * (capacity - old))
        self.nodes.extend([None] * (capacity - old))
        self._free_rows.extend(range(capacity - 1, old - 1, -1))
        self.capacity = capacity

    # Declared for mypy; set by _alloc.
    card_free_milli: NDArray[np.int32]
    card_free_mem: NDArray[np.int32]
    card_total_mem: NDArray[np.int32]
    card_model: NDArray[np.int16]
    card_healthy: NDArray[np.bool_]
    card_island: NDArray[np.int8]
    node_valid: NDArray[np.bool_]
    node_unschedulable: NDArray[np.bool_]
    node_cpu_free: NDArray[np.int64]
    node_mem_free: NDArray[np.int64]
    node_pods_free: NDArray[np.int32]
    node_cpu_alloc: NDArray[np.int64]
    node_mem_alloc: NDArray[np.int64]
    node_pods_alloc: NDArray[np.int32]
    node_card_count: NDArray[np.int16]
    node_temp: NDArray[np.float32]
    node_rack: NDArray[np.int32]
    node_spine: NDArray[np.int32]
    node_labelset: NDArray[np.int32]
    node_taintset: NDArray[np.int32]
    row_version: NDArray[np.int64]

    def touch(self, row: int) -> None:
        self.version += 1
        self.row_version[row] = self.version

    @property
    def size(self) -> int:
        """Rows in use; the columns may be longer (capacity doubles)."""
        return len(self.rows)

    # -- nodes -----------------------------------------------------------------------------

    def upsert_node(self, node: NodeModel) -> int:
        """Add or update a node's row, keeping what its pods already use.

        Most node updates (status heartbeats, condition changes) leave the cards, labels and
        taints as they were; those rows skip the card-column rebuild (measured in
        bench/kernels.py).
        """
        if len(node.cards) > self.max_cards:
            from gpusched.config.defaults import MAX_CARDS_LIMIT  # here: config imports us

            raise ValueError(
                f"node {node.name} has {len(node.cards)} cards, more than maxCardsPerNode"
                f" ({self.max_cards}); raise maxCardsPerNode in the scheduler configuration"
                f" (at most {MAX_CARDS_LIMIT})"
            )
        row = self.rows.get(node.name)
        if row is None:
            if not self._free_rows:
                self._alloc(max(64, self.capacity * 2))
            row = self._free_rows.pop()
            self.rows[node.name] = row
            self.names[row] = node.name
            for col in (
                self.node_cpu_alloc,
                self.node_cpu_free,
                self.node_mem_alloc,
                self.node_mem_free,
                self.node_pods_alloc,
                self.node_pods_free,
            ):
                col[row] = 0
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
        self.node_unschedulable[row] = node.unschedulable
        if old is None or old.labels != node.labels or old.taints != node.taints:
            self.generation += 1
            self.node_labelset[row] = self.labelsets.id(frozenset(node.labels.items()))
            self.node_taintset[row] = self.taintsets.id(node.taints) if node.taints else -1
        if old is None or old.rack != node.rack or old.spine != node.spine:
            self.node_rack[row] = self.racks.id(node.rack) if node.rack else -1
            self.node_spine[row] = self.spines.id(node.spine) if node.spine else -1
        self.node_valid[row] = True
        self.touch(row)
        return row

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
            model[c.index] = self.models.id(c.model)
            total[c.index] = c.memory_mib
            healthy[c.index] = c.healthy
            island[c.index] = c.nvlink_island
        has = model != NO_CARD
        self.card_model[row] = model
        self.card_total_mem[row] = total
        self.card_healthy[row] = healthy
        self.card_island[row] = island
        self.card_free_milli[row] = np.where(has, FULL_CARD_MILLI - used_milli, -used_milli)
        self.card_free_mem[row] = np.where(has, total - used_mem, -used_mem)
        self.node_card_count[row] = len(node.cards)

    def remove_node(self, name: str) -> NodeModel | None:
        row = self.rows.pop(name, None)
        if row is None:
            return None
        node = self.nodes[row]
        self.nodes[row] = None
        self.names[row] = ""
        self.node_valid[row] = False
        self.card_model[row] = NO_CARD
        self.card_free_milli[row] = 0
        self.card_free_mem[row] = 0
        self.node_temp[row] = np.nan
        self._free_rows.append(row)
        self.generation += 1
        self.touch(row)
        return node

    def row_of(self, name: str) -> int:
        return self.rows.get(name, -1)

    def node_at(self, row: int) -> NodeModel:
        node = self.nodes[row]
        if node is None:
            raise KeyError(f"snapshot row {row} is empty")
        return node

    def valid_rows(self) -> NDArray[np.intp]:
        return np.flatnonzero(self.node_valid)

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
    ) -> None:
        """Take (sign=1) or give back (sign=-1) a pod's resources on one row.

        `milli[i]`/`mem_mib[i]` are what the pod holds on card `cards[i]`.
        """
        self.node_cpu_free[row] -= sign * cpu_milli
        self.node_mem_free[row] -= sign * memory_bytes
        self.node_pods_free[row] -= sign
        for c, m, mm in zip(cards, milli, mem_mib, strict=True):
            self.card_free_milli[row, c] -= sign * m
            self.card_free_mem[row, c] -= sign * mm
        self.touch(row)

    def set_temperature(self, row: int, celsius: float) -> None:
        self.node_temp[row] = celsius

    # -- lookups ---------------------------------------------------------------------------

    def allowed_models(self, models: tuple[str, ...]) -> NDArray[np.bool_]:
        """bool[M] by model id: which card models a pod accepts (all when unconstrained).

        Cached per constraint; a new model appearing invalidates the cache by length.
        """
        n_models = len(self.models)
        cached = self._allowed_cache.get(models)
        # Keyed by the model count, not the array length: the first model to appear keeps
        # the length at 1 but may be the one the pod asked for.
        if cached is not None and cached[0] == n_models:
            return cached[1]
        size = max(1, n_models)
        if not models:
            arr = np.ones(size, np.bool_)
        else:
            arr = np.zeros(size, np.bool_)
            for m in models:
                i = self.models.find(m)
                if i >= 0:
                    arr[i] = True
        self._allowed_cache[models] = (n_models, arr)
        return arr

    def labels_of(self, labelset: int) -> Mapping[str, str]:
        value = self.labelsets.values[labelset]
        assert isinstance(value, frozenset)
        return {str(k): str(v) for k, v in value}

    def taints_of(self, taintset: int) -> tuple[Taint, ...]:
        if taintset < 0:
            return ()
        value = self.taintsets.values[taintset]
        assert isinstance(value, tuple)
        return value

    def gpu_milli_capacity(self) -> int:
        rows = self.valid_rows()
        return int(self.node_card_count[rows].sum()) * FULL_CARD_MILLI

    def gpu_milli_free(self) -> int:
        rows = self.valid_rows()
        free = self.card_free_milli[rows]
        return int(np.where(self.card_model[rows] != NO_CARD, free, 0).sum())

    def names_of(self, rows: Iterable[int]) -> list[str]:
        return [self.names[r] for r in rows]

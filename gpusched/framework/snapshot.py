"""The snapshot columns plugins read: struct-of-arrays of the cluster, one row per node.

One row per node, one slot per card (N rows x C slots). This is the read side of the
contract: plugins are typed against `NodeColumns` and only read it; the cache's subclass
(`gpusched/core/cache/snapshot.py`, `Snapshot`) adds the writers and is what core builds.
The columns are live: the cache changes one row when a node or a pod changes, never
rebuilding per pod. The scheduling cycle never awaits between reading them and assuming the
pod, so within a cycle they are a consistent snapshot (the asyncio loop gives the atomicity
kube-scheduler gets from a lock).

Used capacity is implicit (allocatable - free). `row_version[row]` changes whenever a row's
resources change, so per-row caches (plugins/helper/row_cache.py) recompute only what
changed; `generation` changes whenever labels or taints change shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gpusched.model.node import FULL_CARD_MILLI, NodeModel, Taint

NO_CARD = -1
# The kernels track a node's cards in an int64 bitmask (gpusched/kernels/_card_rules.py
# MAX_CARDS): the columns may be at most this wide. Repeated here so loading a config does
# not import numba; a test keeps the two equal.
MAX_CARDS_LIMIT = 63


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


class NodeColumns:
    """The columns and their lookups; writers live in the cache's `Snapshot` subclass."""

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
        # Bumped only when a row gets or loses its node (which node is on which row): caches
        # keyed by row and node name, not by labels, follow this and ignore label churn.
        self.membership = 0
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

    @property
    def size(self) -> int:
        """Rows in use; the columns may be longer (capacity doubles)."""
        return len(self.rows)

    # -- rows ------------------------------------------------------------------------------

    def row_of(self, name: str) -> int:
        return self.rows.get(name, -1)

    def node_at(self, row: int) -> NodeModel:
        node = self.nodes[row]
        if node is None:
            raise KeyError(f"snapshot row {row} is empty")
        return node

    def valid_rows(self) -> NDArray[np.intp]:
        return np.flatnonzero(self.node_valid)

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

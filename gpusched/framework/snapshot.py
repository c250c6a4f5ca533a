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
changed.

Labels: a row's label set (`node_labelset`) holds only the node's labels under the *watched*
keys, the keys something selects on. NodeAffinity declares the keys of each pod's selector
(and of its addedAffinity) through `watch_labels` before reading label sets; declaring a key
some node carries re-derives every row's label set once. Every other label (GPU Feature
Discovery rewrites `nvidia.com/gfd.timestamp` every minute) never reaches the label sets:
a change to it interns nothing and bumps nothing. The topology keys and GPU model labels are
read when a node is parsed, into their own columns (`node_rack`, `card_model`), so they
need no watching here. `generation` changes whenever a row's (watched) label set or taint
set changes, and when ids are renumbered.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gpusched.model.gpu_models import canonical
from gpusched.model.node import FULL_CARD_MILLI, NodeModel, Taint

NO_CARD = -1
# The float32 per-card telemetry columns, in CardReading's order (gpusched/model/telemetry.py).
TELEMETRY_CARD_COLUMNS = (
    "card_temp",
    "card_mem_temp",
    "card_power",
    "card_power_limit",
    "card_util",
    "card_fb_used",
    "card_fb_free",
)
# The kernels track a node's cards in an int64 bitmask (gpusched/kernels/_card_rules.py
# MAX_CARDS): the columns may be at most this wide. Repeated here so loading a config does
# not import numba; a test keeps the two equal.
MAX_CARDS_LIMIT = 63
# Label keys watched at most; the least recently declared beyond this are dropped (a key a
# pending pod still selects on is declared again at its next attempt). Keys come from pod
# selectors, so this is user input: a few dozen in a real cluster.
MAX_WATCHED_KEYS = 1024
# Beyond this many touches since a version, changed_rows reads row_version in one vector
# pass instead of the log (building an array from a long list costs more than the pass).
RECENT_TOUCHES = 1024
TOUCH_LOG = 2048  # entries of NodeColumns.touched (a ring), more than RECENT_TOUCHES
# GPU model constraints (pod input) whose allowed-model arrays are kept.
MAX_ALLOWED_CACHE = 256
# Distinct "other" resources (extended resources, ephemeral-storage, hugepages-*) with a
# column; a real cluster has a handful. Past it a node offering a new one is refused.
MAX_OTHER_RESOURCES = 64


class Interner:
    """Small ids for hashable values (models, racks, label sets, taint sets).

    `id` interns for good (models, racks and spines: a handful per cluster). Label and taint
    sets come and go with the nodes that carry them, so they are reference-counted instead
    (`acquire` / `release`): a set no node uses any more is freed. Its id is not handed out
    again within the same `epoch`, so a consumer's table indexed by id (NodeAffinity's,
    TaintToleration's) never reads another set's verdict under an old id; when freed ids
    outnumber the live ones, `compact` renumbers the live sets densely and bumps `epoch`,
    and consumers rebuild their tables once. The id space (`len`) stays within twice the
    live sets plus a constant, however many sets churn through it.
    """

    __slots__ = ("_ids", "dead", "epoch", "refs", "values")

    def __init__(self) -> None:
        self._ids: dict[object, int] = {}
        self.values: list[object] = []
        self.refs: list[int] = []
        self.dead = 0  # freed ids since the last compaction
        self.epoch = 0  # bumped whenever ids are renumbered (compact, reset)

    def id(self, value: object) -> int:
        got = self._ids.get(value)
        if got is None:
            got = len(self.values)
            self._ids[value] = got
            self.values.append(value)
            self.refs.append(0)
        return got

    def acquire(self, value: object) -> int:
        got = self.id(value)
        self.refs[got] += 1
        return got

    def release(self, id_: int) -> None:
        if id_ < 0:
            return
        self.refs[id_] -= 1
        if self.refs[id_] == 0:
            del self._ids[self.values[id_]]
            self.values[id_] = None
            self.dead += 1

    def find(self, value: object) -> int:
        return self._ids.get(value, -1)

    @property
    def live(self) -> int:
        """Values currently interned (the id space may be larger by the freed ids)."""
        return len(self._ids)

    def wants_compaction(self) -> bool:
        return self.dead > max(64, len(self._ids))

    def compact(self) -> NDArray[np.int32]:
        """Renumber the live values densely, in id order; returns old id -> new id (-1 for a
        freed id) for the caller to rewrite its id column."""
        remap = np.full(len(self.values), -1, np.int32)
        values: list[object] = []
        refs: list[int] = []
        for old, value in enumerate(self.values):
            if self.refs[old] > 0:
                remap[old] = len(values)
                values.append(value)
                refs.append(self.refs[old])
        self.values, self.refs, self.dead = values, refs, 0
        self._ids = {v: i for i, v in enumerate(values)}
        self.epoch += 1
        return remap

    def reset(self) -> None:
        """Forget every value (the caller re-acquires what it uses); a new epoch."""
        self._ids.clear()
        self.values.clear()
        self.refs.clear()
        self.dead = 0
        self.epoch += 1

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
        self.cliques = Interner()  # NVLink fabric cliques (nvidia.com/gpu.clique values)
        self.labelsets = Interner()  # values: frozenset of (key, value) under watched keys
        self.taintsets = Interner()  # values: tuple[Taint, ...]
        # The label keys something selects on, least recently declared first.
        self.watched_keys: dict[str, None] = {}
        # Times the label sets were re-derived because a newly watched key is on some node.
        self.relabels = 0
        self._allowed_cache: dict[tuple[str, ...], tuple[int, NDArray[np.bool_]]] = {}
        self._present_ids: NDArray[np.int64] = np.zeros(0, np.int64)
        self._present_key: tuple[int, int] = (-1, -1)
        # Bumped whenever a row's label set or taint set changes or their ids are
        # renumbered, so plugins can drop caches keyed by those ids.
        self.generation = 0
        # Bumped whenever a row's cards are rewritten (a node added or its inventory changed).
        self.card_layout = 0
        # Bumped whenever the telemetry columns may have changed (an ingestion pass, a row's
        # readings cleared): state derived from the readings (Thermal's latch) is redone
        # only then, not at every Filter and Score.
        self.telemetry_version = 0
        # Rows whose node is cordoned (node_unschedulable set): NodeUnschedulable reads no
        # column while it is 0.
        self.cordoned = 0
        # Rows whose cards are published through DRA (node_dra_cards set): GPUFit reads no
        # column for them while it is 0.
        self.dra_nodes = 0
        # Bumped only when a row gets or loses its node (which node is on which row): caches
        # keyed by row and node name, not by labels, follow this and ignore label churn.
        self.membership = 0
        # Every change to a row's resources stamps it with a new version, so a plugin that
        # caches per-row results recomputes only the rows changed since it last looked.
        self.version = 0
        # The row of each of the latest TOUCH_LOG touches, a ring: the touch that made
        # version v is at (v - 1) % TOUCH_LOG. Rows changed since a recent version are read
        # from here in O(changes), not from a pass over row_version (Snapshot.touch).
        self.touched = np.zeros(TOUCH_LOG, np.int64)
        # Other resources (PodRequest.other, NodeModel.other): name -> column of
        # node_other_alloc / node_other_free, created when a node or a charged pod first
        # names the resource. A row without the resource has 0 allocatable there.
        self.other_index: dict[str, int] = {}
        self.node_other_alloc: NDArray[np.int64] = np.zeros((0, 0), np.int64)
        self.node_other_free: NDArray[np.int64] = np.zeros((0, 0), np.int64)
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
        grow("card_listed_healthy", (capacity, C), np.bool_, False)
        grow("card_sick", (capacity, C), np.bool_, False)
        for name in TELEMETRY_CARD_COLUMNS:
            grow(name, (capacity, C), np.float32, np.nan)
        grow("card_sampled_at", (capacity, C), np.float64, np.nan)
        grow("node_valid", (capacity,), np.bool_, False)
        grow("node_unschedulable", (capacity,), np.bool_, False)
        grow("node_cpu_free", (capacity,), np.int64, 0)
        grow("node_mem_free", (capacity,), np.int64, 0)
        grow("node_pods_free", (capacity,), np.int32, 0)
        grow("node_cpu_alloc", (capacity,), np.int64, 0)
        grow("node_mem_alloc", (capacity,), np.int64, 0)
        grow("node_pods_alloc", (capacity,), np.int32, 0)
        grow("node_card_count", (capacity,), np.int16, 0)
        grow("node_dra_cards", (capacity,), np.bool_, False)
        grow("node_nvlink_unknown", (capacity,), np.bool_, False)
        grow("node_temp", (capacity,), np.float32, np.nan)
        grow("node_sampled_at", (capacity,), np.float64, np.nan)
        grow("node_rack", (capacity,), np.int32, -1)
        grow("node_spine", (capacity,), np.int32, -1)
        grow("node_clique", (capacity,), np.int32, -1)
        grow("node_labelset", (capacity,), np.int32, -1)
        grow("node_taintset", (capacity,), np.int32, -1)
        grow("row_version", (capacity,), np.int64, 0)
        grow("node_other_alloc", (capacity, len(self.other_index)), np.int64, 0)
        grow("node_other_free", (capacity, len(self.other_index)), np.int64, 0)
        self.names.extend([""] * (capacity - old))
        self.nodes.extend([None] * (capacity - old))
        self._free_rows.extend(range(capacity - 1, old - 1, -1))
        self.capacity = capacity

    # Declared for mypy; set by _alloc.
    card_free_milli: NDArray[np.int32]
    card_free_mem: NDArray[np.int32]
    card_total_mem: NDArray[np.int32]
    card_model: NDArray[np.int16]
    # Whether a card may be given out: the node's own word (`card_listed_healthy`: its
    # inventory, the device plugin's count) and live telemetry's (`card_sick`: a hardware
    # XID, memory over its temperature limit; gpusched/telemetry/ingest.py) together.
    card_healthy: NDArray[np.bool_]
    card_listed_healthy: NDArray[np.bool_]
    card_sick: NDArray[np.bool_]
    card_island: NDArray[np.int8]
    # Live readings per card (NaN: none fresh; stale readings are cleared to NaN, so no
    # plugin can read an old value as current): GPU and memory temperature (°C), power draw
    # and enforced limit (W), utilisation (%), frame buffer used and free (MiB), and when
    # they were sampled (wall seconds; kept after they go stale, NaN if never seen).
    card_temp: NDArray[np.float32]
    card_mem_temp: NDArray[np.float32]
    card_power: NDArray[np.float32]
    card_power_limit: NDArray[np.float32]
    card_util: NDArray[np.float32]
    card_fb_used: NDArray[np.float32]
    card_fb_free: NDArray[np.float32]
    card_sampled_at: NDArray[np.float64]
    node_valid: NDArray[np.bool_]
    node_unschedulable: NDArray[np.bool_]
    node_cpu_free: NDArray[np.int64]
    node_mem_free: NDArray[np.int64]
    node_pods_free: NDArray[np.int32]
    node_cpu_alloc: NDArray[np.int64]
    node_mem_alloc: NDArray[np.int64]
    node_pods_alloc: NDArray[np.int32]
    node_card_count: NDArray[np.int16]
    # The row's cards come from ResourceSlices (DRA): only claims get them, through the
    # allocator; a pod asking by annotation or nvidia.com/gpu gets none there (nothing on
    # such a node would enforce its card assignment).
    node_dra_cards: NDArray[np.bool_]
    # The row's cards come from GPU Feature Discovery's labels or from DRA slices, neither
    # of which says which cards share an NVLink island: the layout is unknown (an
    # inventory's -1 island means "no NVLink peer", a known layout).
    node_nvlink_unknown: NDArray[np.bool_]
    # The hottest card's fresh GPU temperature (°C; NaN: no fresh reading) and the newest
    # fresh reading's sample time.
    node_temp: NDArray[np.float32]
    node_sampled_at: NDArray[np.float64]
    node_rack: NDArray[np.int32]
    node_spine: NDArray[np.int32]
    # The node's NVLink fabric clique id (`cliques`), -1 when it is in none.
    node_clique: NDArray[np.int32]
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

    def other_column(self, name: str) -> int:
        """The column of an other resource, -1 when no node or pod has named it."""
        return self.other_index.get(name, -1)

    def valid_rows(self) -> NDArray[np.intp]:
        return np.flatnonzero(self.node_valid)

    def changed_rows(self, since: int) -> NDArray[np.intp]:
        """The rows whose resources changed after version `since` (row_version > since),
        ascending: from the log of touches when they are few and it reaches back that far,
        else one pass over row_version."""
        recent = self.version - since
        if recent <= 0:
            return np.empty(0, np.intp)
        if recent <= RECENT_TOUCHES:
            start, end = since % TOUCH_LOG, self.version % TOUCH_LOG
            log = self.touched
            rows = log[start:end] if start < end else np.concatenate((log[start:], log[:end]))
            if recent <= 256:
                # Through a Python set: np.unique's fixed cost is several times this here.
                return np.array(sorted(set(rows.tolist())), np.intp)
            return np.unique(rows).astype(np.intp)
        return np.flatnonzero(self.row_version > since).astype(np.intp)

    # -- lookups ---------------------------------------------------------------------------

    def allowed_models(self, models: tuple[str, ...]) -> NDArray[np.bool_]:
        """bool[M] by model id: which card models a pod accepts (all when unconstrained).

        Models are found by canonical name (model/gpu_models.py), as the cards were interned:
        `A100M80` and `NVIDIA-A100-SXM4-80GB` pick the same cards, whichever name a node
        published. Cached per constraint; a new model appearing invalidates the cache by
        length.
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
                i = self.models.find(canonical(m))
                if i >= 0:
                    arr[i] = True
        cache = self._allowed_cache
        cache.pop(models, None)
        if len(cache) >= MAX_ALLOWED_CACHE:
            # Least recently used first: dicts keep insertion order, and a hit re-inserts.
            cache.pop(next(iter(cache)))
        cache[models] = (n_models, arr)
        return arr

    def present_model_ids(self) -> NDArray[np.int64]:
        """The ids of the card models some node has now, ascending (the interner keeps the
        models of nodes long gone, so a constraint may find an id no card carries any
        more). Cached per card layout and row membership: one pass over the card column
        per change, none per pod."""
        key = (self.card_layout, self.membership)
        if self._present_key != key:
            rows = self.card_model[self.node_valid[: self.capacity]]
            self._present_ids = np.unique(rows[rows != NO_CARD]).astype(np.int64)
            self._present_key = key
        return self._present_ids

    def present_models(self) -> tuple[str, ...]:
        """The canonical names of the card models some node has now, sorted."""
        values = self.models.values
        return tuple(sorted(str(values[i]) for i in self.present_model_ids().tolist()))

    def labels_of(self, labelset: int) -> Mapping[str, str]:
        """A label set's labels under the watched keys (empty for a freed id)."""
        value = self.labelsets.values[labelset]
        if value is None:
            return {}
        assert isinstance(value, frozenset)
        return {str(k): str(v) for k, v in value}

    def taints_of(self, taintset: int) -> tuple[Taint, ...]:
        if taintset < 0:
            return ()
        value = self.taintsets.values[taintset]
        if value is None:
            return ()
        assert isinstance(value, tuple)
        return value

    # -- label sets ------------------------------------------------------------------------

    def watch_labels(self, keys: Iterable[str]) -> None:
        """Declare label keys something selects on, before reading label sets.

        A key already watched costs a dict move. A new key that some node carries re-derives
        every row's label set (once: from then on the key is part of every label set), so a
        selector on a label that changed before anyone watched it still sees its value.
        """
        watched = self.watched_keys
        fresh: list[str] = []
        for key in keys:
            if key in watched:
                del watched[key]
            else:
                fresh.append(key)
            watched[key] = None
        while len(watched) > MAX_WATCHED_KEYS:
            # Dropping a key needs no re-derivation: the label sets interned while it was
            # watched keep it, which is correct for it and harmless for every other key.
            del watched[next(iter(watched))]
        if fresh and any(
            node is not None and any(k in node.labels for k in fresh) for node in self.nodes
        ):
            self._relabel()

    def label_key(self, labels: Mapping[str, str]) -> frozenset[tuple[str, str]]:
        """The labels under the watched keys: what a row's label set holds."""
        watched = self.watched_keys
        if len(watched) < len(labels):
            return frozenset((k, labels[k]) for k in watched if k in labels)
        return frozenset(kv for kv in labels.items() if kv[0] in watched)

    def _set_labelset(self, row: int, labels: Mapping[str, str] | None) -> bool:
        """Point `row` at the label set of `labels` (None: no node); whether it changed."""
        new = self.labelsets.acquire(self.label_key(labels)) if labels is not None else -1
        old = int(self.node_labelset[row])
        self.labelsets.release(old)
        if new == old:
            return False
        self.node_labelset[row] = new
        if self.labelsets.wants_compaction():
            self._compact(self.labelsets, self.node_labelset)
        return True

    def _set_taintset(self, row: int, taints: tuple[Taint, ...]) -> bool:
        new = self.taintsets.acquire(taints) if taints else -1
        old = int(self.node_taintset[row])
        self.taintsets.release(old)
        if new == old:
            return False
        self.node_taintset[row] = new
        if self.taintsets.wants_compaction():
            self._compact(self.taintsets, self.node_taintset)
        return True

    def _compact(self, interner: Interner, column: NDArray[np.int32]) -> None:
        remap = interner.compact()
        used = column >= 0
        column[used] = remap[column[used]]
        self.generation += 1

    def _relabel(self) -> None:
        """Re-derive every row's label set under the watched keys (a new epoch of ids)."""
        self.labelsets.reset()
        self.node_labelset[:] = -1
        for row, node in enumerate(self.nodes):
            if node is not None:
                self.node_labelset[row] = self.labelsets.acquire(self.label_key(node.labels))
        self.relabels += 1
        self.generation += 1

    def gpu_milli_capacity(self) -> int:
        rows = self.valid_rows()
        return int(self.node_card_count[rows].sum()) * FULL_CARD_MILLI

    def gpu_milli_free(self) -> int:
        rows = self.valid_rows()
        free = self.card_free_milli[rows]
        return int(np.where(self.card_model[rows] != NO_CARD, free, 0).sum())

    def names_of(self, rows: Iterable[int]) -> list[str]:
        return [self.names[r] for r in rows]

"""The structured-parameters device allocator of Kubernetes 1.36, ported from
`k8s.io/dynamic-resource-allocation/structured` (the `incubating` variant, which kube picks
when DRAConsumableCapacity or binding conditions are on and which is a superset of `stable`).

How it decides, as kube does:
- Pools: slices are grouped by (driver, pool); only the newest generation counts. A pool is
  gathered for a node when one of its slices is local to it (nodeName), selects it
  (nodeSelector), covers every node (allNodes), has a device reachable from it
  (perDeviceNodeSelection), or defines shared counters. A pool whose newest generation has
  fewer slices than resourceSliceCount is incomplete, and one with duplicate device names
  (or counters that do not resolve) is invalid: neither is allocated from, a request for
  `All` devices fails hard on either, and if nothing fits while an invalid pool was seen
  the node fails with "invalid resource pools were encountered".
- Search: claims in order, requests in order, `count` devices per request; each device is
  picked from the candidates in kube's order (pools by driver then name, pools with binding
  conditions last, slices by name, devices as listed), recursing and backtracking on the
  constraints. Within one request only later candidates are tried for the next device
  (combinations, not permutations). The first complete solution wins. `prefer`, when
  given, reorders the candidates (stable sort) so the caller's cards are tried first.
- A candidate must be free (not allocated, not being allocated in this run; admin access
  ignores other claims' use), match the class's and the request's CEL selectors, have the
  requested capacity left, fit the shared counters it consumes, tolerate its NoSchedule /
  NoExecute taints ("None" and unknown effects never block), and keep every constraint
  (matchAttribute, distinctAttribute) of its claim satisfiable.

Failures carry kube's text: UNSCHEDULABLE ones concern this node only (the plugin reports
them per node, "cannot allocate all claims" above all), ERROR ones are problems with the
claim or class (a CEL error, a missing class) that kube turns into an Error status.

Everything here is pure: the caller builds a `SliceIndex` from the ResourceSlices it knows
(once per change of slices), the `InUse` state from the allocated claims, and then an
`Allocator` per pod that it asks once per candidate node.
"""

from __future__ import annotations

import enum
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any, Protocol, runtime_checkable

from gpusched.model.dra import (
    AllocationMode,
    AllocationResult,
    Attribute,
    Capacity,
    CapacityPolicy,
    Device,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    DeviceResult,
    DeviceSubRequest,
    ResourceClaim,
    ResourceSlice,
    Toleration,
)
from gpusched.model.selector import NODE_OPERATORS, Requirement
from gpusched.model.volume import NodeSelectorTerm

DeviceId = tuple[str, str, str]  # (driver, pool, device)
PoolId = tuple[str, str]  # (driver, pool)
CounterKey = tuple[str, str, str, str]  # (driver, pool, counterSet, counter)

# resource.k8s.io/v1 AllocationResultsMaxSize: at most this many devices per claim.
ALLOCATION_RESULTS_MAX_SIZE = 32
# The DynamicResources plugin's filter timeout default (DRASchedulerFilterTimeout).
DEFAULT_TIMEOUT_SECONDS = 10.0

CANNOT_ALLOCATE = "cannot allocate all claims"
INVALID_POOLS = "invalid resource pools were encountered"
TIMED_OUT = "timed out trying to allocate devices"

_BLOCKING_TAINT_EFFECTS = frozenset(("NoSchedule", "NoExecute"))
_INT64_MAX = 2**63 - 1
_NAME_FIELD = "metadata.name"
# How many search steps run between two reads of the clock.
_CLOCK_EVERY = 256


# -- the CEL evaluator this module codes against ----------------------------------------


@runtime_checkable
class SelectorFailure(Protocol):
    """What `gpusched.dra.cel.CelError` looks like: something with a message."""

    @property
    def message(self) -> str: ...


class SelectorEvaluator(Protocol):
    """`gpusched.dra.cel.Selectors`: compile returns a compiled expression or a failure,
    matches a bool or a failure."""

    def compile(self, expr: str) -> Any: ...

    def matches(self, compiled: Any, driver: str, device: Device) -> Any: ...


# -- results -------------------------------------------------------------------------------


class FailureKind(enum.Enum):
    # This node cannot take the claims (kube: Unschedulable for the node, other nodes go on).
    UNSCHEDULABLE = "Unschedulable"
    # Something is wrong with a claim, class or slice (kube: an Error status that aborts
    # the scheduling attempt, retried with backoff).
    ERROR = "Error"


@dataclass(frozen=True, slots=True)
class AllocationFailure:
    message: str
    kind: FailureKind = FailureKind.UNSCHEDULABLE


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InUse:
    """What allocated claims hold, as kube's allocated-state tracking sees it.

    `devices`: single-allocation devices some claim holds (admin-access results excluded).
    `consumed_capacity`: per multi-allocation device (results with a shareID), the sum of
    the capacity its shares consumed. `consumed_counters`: per (driver, pool, counterSet,
    counter), what allocated devices of the pool take from its shared counters.
    `share_ids`: (driver, pool, device, shareID) of every allocated share."""

    devices: frozenset[DeviceId] = frozenset()
    consumed_capacity: Mapping[DeviceId, Mapping[str, Decimal]] = field(default_factory=dict)
    consumed_counters: Mapping[CounterKey, Decimal] = field(default_factory=dict)
    share_ids: frozenset[tuple[str, str, str, str]] = frozenset()


EMPTY_IN_USE = InUse()


def newest_slices(slices: Iterable[ResourceSlice]) -> dict[PoolId, list[ResourceSlice]]:
    newest: dict[PoolId, list[ResourceSlice]] = {}
    for s in slices:
        key = (s.driver, s.pool)
        have = newest.get(key)
        if have is None or s.pool_generation > have[0].pool_generation:
            newest[key] = [s]
        elif s.pool_generation == have[0].pool_generation:
            have.append(s)
    return newest


def same_slices(a: Sequence[ResourceSlice], b: Sequence[ResourceSlice]) -> bool:
    """Whether two slice lists hold the very same objects (a port hands out a new tuple on
    every change, claims' included; what is derived from slices alone still holds)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def in_use_from_claims(claims: Iterable[ResourceClaim], slices: Iterable[ResourceSlice]) -> InUse:
    """The `InUse` of these claims' allocations (unallocated claims are skipped).

    Like kube: admin-access results hold nothing; a result with a shareID is one share of a
    multi-allocation device and adds its consumedCapacity; any other result holds its
    device. A held device (exclusively or by a share) takes the counters it consumes, once,
    from the newest generation of its pool's slices."""
    devices: set[DeviceId] = set()
    consumed: dict[DeviceId, dict[str, Decimal]] = {}
    shares: set[tuple[str, str, str, str]] = set()
    for claim in claims:
        if claim.allocation is None:
            continue
        for r in claim.allocation.results:
            if r.admin_access:
                continue
            if r.share_id:
                shares.add((r.driver, r.pool, r.device, r.share_id))
                per = consumed.setdefault(r.device_id, {})
                for name, q in r.consumed_capacity.items():
                    per[name] = per.get(name, Decimal(0)) + q
            else:
                devices.add(r.device_id)
    held = devices | consumed.keys()
    counters: dict[CounterKey, Decimal] = {}
    if held:
        for (driver, pool), group in newest_slices(slices).items():
            seen: set[str] = set()
            for s in group:
                for d in s.devices:
                    if d.name in seen or (driver, pool, d.name) not in held:
                        continue
                    seen.add(d.name)
                    for cc in d.consumes_counters:
                        for name, q in cc.counters.items():
                            key = (driver, pool, cc.counter_set, name)
                            counters[key] = counters.get(key, Decimal(0)) + q
    return InUse(frozenset(devices), consumed, counters, frozenset(shares))


class InUseTracker:
    """`in_use_from_claims` kept across calls, for a caller that asks after every change of
    the claims (one scheduling cycle each): when every claim seen before still has the very
    same allocation object, only the new claims' results are added; any other change (a claim
    deallocated or gone, other slices, devices that consume counters) recomputes it all.
    Allocations are immutable, so identity is enough."""

    def __init__(self) -> None:
        self._seen: dict[str, AllocationResult] = {}
        self._slices: tuple[ResourceSlice, ...] | None = None
        self._counters = False
        self._in_use = EMPTY_IN_USE

    def update(self, claims: Iterable[ResourceClaim], slices: tuple[ResourceSlice, ...]) -> InUse:
        allocated = {c.uid: c.allocation for c in claims if c.allocation is not None}
        if slices is not self._slices:
            self._slices = slices
            self._counters = any(d.consumes_counters for s in slices for d in s.devices)
            self._seen = {}
        kept = len(self._seen) <= len(allocated) and all(
            allocated.get(uid) is a for uid, a in self._seen.items()
        )
        if self._counters or not kept:
            self._in_use = in_use_from_claims(
                (c for c in claims if c.allocation is not None), slices
            )
            self._seen = allocated
            return self._in_use
        added = [a for uid, a in allocated.items() if uid not in self._seen]
        if not added:
            return self._in_use
        prev = self._in_use
        devices: set[DeviceId] = set()
        consumed = dict(prev.consumed_capacity)
        shares: set[tuple[str, str, str, str]] = set()
        for alloc in added:
            for r in alloc.results:
                if r.admin_access:
                    continue
                if r.share_id:
                    shares.add((r.driver, r.pool, r.device, r.share_id))
                    per = dict(consumed.get(r.device_id, {}))
                    for name, q in r.consumed_capacity.items():
                        per[name] = per.get(name, Decimal(0)) + q
                    consumed[r.device_id] = per
                else:
                    devices.add(r.device_id)
        self._in_use = InUse(
            prev.devices | devices, consumed, prev.consumed_counters, prev.share_ids | shares
        )
        self._seen = allocated
        return self._in_use


# -- node selection ------------------------------------------------------------------------


class _NodeSelectorError(Exception):
    pass


def _parse_node_selector(raw: Mapping[str, object]) -> tuple[NodeSelectorTerm, ...]:
    """A raw v1.NodeSelector as component-helpers' nodeaffinity.NewNodeSelector reads it;
    a malformed one raises (kube: "failed to parse node selector")."""
    terms_raw = raw.get("nodeSelectorTerms") or []
    if not isinstance(terms_raw, list | tuple):
        raise _NodeSelectorError("nodeSelectorTerms must be a list")
    terms: list[NodeSelectorTerm] = []
    for t in terms_raw:
        if not isinstance(t, Mapping):
            raise _NodeSelectorError("a node selector term must be an object")
        labels = tuple(_requirement(r, field=False) for r in t.get("matchExpressions") or [])
        fields = tuple(_requirement(r, field=True) for r in t.get("matchFields") or [])
        terms.append(NodeSelectorTerm(labels, fields))
    return tuple(terms)


def _requirement(raw: object, *, field: bool) -> Requirement:
    if not isinstance(raw, Mapping):
        raise _NodeSelectorError("a node selector requirement must be an object")
    key, op = str(raw.get("key", "")), str(raw.get("operator", ""))
    values_raw = raw.get("values") or []
    if not isinstance(values_raw, list | tuple):
        raise _NodeSelectorError(f"values of {key!r} must be a list")
    values = [str(v) for v in values_raw]
    if field:
        if key != _NAME_FIELD:
            raise _NodeSelectorError(f"{key!r} is not a valid node field selector key")
        if op not in ("In", "NotIn"):
            raise _NodeSelectorError(f"{op!r} is not a valid node field selector operator")
        if len(values) != 1:
            raise _NodeSelectorError(
                f"unexpected number of value ({len(values)}) for node field selector"
                f" operator {op!r}"
            )
    elif op not in NODE_OPERATORS:
        raise _NodeSelectorError(f"{op!r} is not a valid label selector operator")
    elif op in ("In", "NotIn") and not values:
        raise _NodeSelectorError(f"for '{op}' operator, values set can't be empty")
    return Requirement(key, op, frozenset(values))


def _node_matches(
    node: Node,
    node_name: str,
    all_nodes: bool,
    selector: tuple[NodeSelectorTerm, ...] | None,
) -> bool:
    # kube's NodeMatches: nodeName, then allNodes, then the selector (terms ORed).
    if node_name:
        return node.name == node_name
    if all_nodes:
        return True
    if selector is not None:
        return any(t.matches(node.labels, node.name) for t in selector)
    return False


def node_selector_matches(raw: Mapping[str, object], node: Node) -> bool | str:
    """Whether a raw v1.NodeSelector (an allocation's status.allocation.nodeSelector)
    selects the node, or why it cannot be read (kube: an Error status)."""
    try:
        terms = _parse_node_selector(raw)
    except _NodeSelectorError as e:
        return f"failed to parse node selector: {e}"
    return any(t.matches(node.labels, node.name) for t in terms)


# -- the slices, indexed once ----------------------------------------------------------------


class Candidate:
    """One device of a gathered pool, in kube's order (`order`)."""

    __slots__ = (
        "binding",
        "counters",
        "device",
        "id",
        "multi",
        "node_name",
        "node_selector",
        "order",
        "pool",
        "slice",
    )

    def __init__(self, pool: Pool, s: ResourceSlice, device: Device, order: int) -> None:
        self.id: DeviceId = (s.driver, s.pool, device.name)
        self.device = device
        self.slice = s
        self.pool = pool
        self.order = order
        self.multi = device.allow_multiple_allocations
        self.binding = bool(device.binding_conditions)
        self.counters: tuple[tuple[tuple[str, str], Decimal], ...] = tuple(
            ((cc.counter_set, name), q)
            for cc in device.consumes_counters
            for name, q in cc.counters.items()
        )
        # What pins the allocation to nodes (createNodeSelector).
        if s.per_device_node_selection:
            self.node_name, self.node_selector = device.node_name, device.node_selector
        else:
            self.node_name, self.node_selector = s.node_name, s.node_selector


class Pool:
    __slots__ = (
        "candidates",
        "counters",
        "has_binding_conditions",
        "id",
        "incomplete",
        "invalid_reason",
    )

    def __init__(self, pool_id: PoolId) -> None:
        self.id = pool_id
        self.incomplete = False
        self.invalid_reason = ""
        self.candidates: list[Candidate] = []
        self.counters: dict[tuple[str, str], Decimal] = {}  # (set, counter) -> total
        self.has_binding_conditions = False

    @property
    def invalid(self) -> bool:
        return bool(self.invalid_reason)

    @property
    def name(self) -> str:
        return f"{self.id[0]}/{self.id[1]}"


@dataclass(slots=True)
class NodePools:
    pools: list[Pool]
    # Devices of complete, valid pools, in kube's order.
    candidates: list[Candidate]
    error: str = ""  # a node selector that does not parse


class SliceIndex:
    """The ResourceSlices, grouped for cheap per-node gathering. Build it again when the
    slices change; it also holds the selector results, which are valid as long as its
    slices are."""

    # Past this many cached selector results the cache starts over (memory bound).
    MATCH_CACHE_LIMIT = 200_000

    def __init__(self, slices: Iterable[ResourceSlice]) -> None:
        self.slices = tuple(slices)
        self._on_node: dict[str, list[ResourceSlice]] = {}
        self._shared: list[ResourceSlice] = []
        # Per pool: the newest generation and how many slices each generation has.
        self._max_gen: dict[PoolId, int] = {}
        self._gen_count: dict[tuple[PoolId, int], int] = {}
        self._by_pool_gen: dict[tuple[PoolId, int], list[ResourceSlice]] = {}
        for s in self.slices:
            (self._on_node.setdefault(s.node_name, []) if s.node_name else self._shared).append(s)
            pid = (s.driver, s.pool)
            if s.pool_generation > self._max_gen.get(pid, -(2**63)):
                self._max_gen[pid] = s.pool_generation
            key = (pid, s.pool_generation)
            self._gen_count[key] = self._gen_count.get(key, 0) + 1
            self._by_pool_gen.setdefault(key, []).append(s)
        self._selectors: dict[int, tuple[NodeSelectorTerm, ...] | str] = {}
        # Per node name: its labels when gathered and the pools; one entry per node, so label
        # churn (GFD rewrites a timestamp label every minute) does not grow it.
        self._nodes: dict[str, tuple[Mapping[str, str], NodePools]] = {}
        # (class name, class selectors, request selectors, id(device)) -> (device, result)
        self.match_cache: dict[tuple[object, ...], tuple[Device, bool]] = {}
        # (capacity requests, id(device)) -> (device, what one allocation consumes)
        self.plan_cache: dict[tuple[object, ...], tuple[Device, ConsumptionPlan]] = {}

    def _selector(self, raw: Mapping[str, object]) -> tuple[NodeSelectorTerm, ...]:
        got = self._selectors.get(id(raw))
        if got is None:
            try:
                got = _parse_node_selector(raw)
            except _NodeSelectorError as e:
                got = str(e)
            self._selectors[id(raw)] = got
        if isinstance(got, str):
            raise _NodeSelectorError(got)
        return got

    def _matches(
        self, node: Node, name: str, all_nodes: bool, raw: Mapping[str, object] | None
    ) -> bool:
        return _node_matches(node, name, all_nodes, None if raw is None else self._selector(raw))

    def _device_matches(self, node: Node, s: ResourceSlice, d: Device) -> bool:
        try:
            return self._matches(node, d.node_name, d.all_nodes, d.node_selector)
        except _NodeSelectorError as e:
            raise _NodeSelectorError(
                f"failed to perform node selection for device {d.name} in slice {s.name}:"
                f" failed to parse node selector: {e}"
            ) from None

    def pools_for(self, node: Node) -> NodePools:
        have = self._nodes.get(node.name)
        if have is not None and (have[0] is node.labels or have[0] == node.labels):
            return have[1]
        try:
            got = self._gather(node)
        except _NodeSelectorError as e:
            got = NodePools([], [], str(e))
        self._nodes[node.name] = (dict(node.labels), got)
        return got

    def _gather(self, node: Node) -> NodePools:
        # GatherPools: the slices relevant for the node, newest generation per pool.
        relevant: dict[PoolId, list[ResourceSlice]] = {}
        device_slices: set[int] = set()
        for s in (*self._on_node.get(node.name, ()), *self._shared):
            is_device_slice = False
            if s.node_name or s.all_nodes or s.node_selector is not None:
                try:
                    is_device_slice = self._matches(node, s.node_name, s.all_nodes, s.node_selector)
                except _NodeSelectorError as e:
                    raise _NodeSelectorError(
                        f"failed to perform node selection for slice {s.name}: failed to"
                        f" parse node selector: {e}"
                    ) from None
            elif s.per_device_node_selection:
                is_device_slice = any(self._device_matches(node, s, d) for d in s.devices)
            # Slices with shared counters are needed by every node that uses the pool.
            if not is_device_slice and not s.shared_counters:
                continue
            if is_device_slice:
                device_slices.add(id(s))
            pid = (s.driver, s.pool)
            have = relevant.get(pid)
            if have is None or s.pool_generation > have[0].pool_generation:
                relevant[pid] = [s]
            elif s.pool_generation == have[0].pool_generation:
                have.append(s)

        pools: list[Pool] = []
        for pid, group in relevant.items():
            gen, count = group[0].pool_generation, group[0].pool_slice_count
            pool = Pool(pid)
            if len(group) != count:
                if self._max_gen[pid] > gen:
                    # The driver is replacing this generation; a newer one exists whose
                    # slices are not for this node: ignore the old devices.
                    continue
                if self._gen_count[(pid, gen)] != count:
                    pool.incomplete = True
                    pools.append(pool)
                    continue
            self._build_pool(pool, node, sorted(group, key=lambda s: s.name), device_slices)
            pools.append(pool)
        pools.sort(key=lambda p: (p.has_binding_conditions, p.id))
        candidates: list[Candidate] = []
        for pool in pools:
            if pool.incomplete or pool.invalid:
                continue
            for c in pool.candidates:
                c.order = len(candidates)
                candidates.append(c)
        return NodePools(pools, candidates)

    def _build_pool(
        self, pool: Pool, node: Node, group: list[ResourceSlice], device_slices: set[int]
    ) -> None:
        broken = next((e for s in group for e in s.errors), "")
        if broken:
            pool.invalid_reason = broken
            return
        # Counter sets come from every slice of the pool's generation, also those that are
        # not for this node: devices here may consume them.
        gen = group[0].pool_generation
        for s in self._by_pool_gen[(pool.id, gen)]:
            for cs in s.shared_counters:
                if any(k[0] == cs.name for k in pool.counters):
                    pool.invalid_reason = f"duplicate counter set name {cs.name}"
                    return
                for name, q in cs.counters.items():
                    pool.counters[(cs.name, name)] = q
        sets = {k[0] for k in pool.counters}
        names: set[str] = set()
        for s in group:
            if id(s) not in device_slices:
                continue
            for d in s.devices:
                if d.name in names:
                    pool.invalid_reason = f"duplicate device name {d.name}"
                    return
                names.add(d.name)
                for cc in d.consumes_counters:
                    if cc.counter_set not in sets:
                        pool.invalid_reason = f"counter set {cc.counter_set} not found"
                        return
                    for cname in cc.counters:
                        if (cc.counter_set, cname) not in pool.counters:
                            pool.invalid_reason = (
                                f"counter {cname} not found in counter set {cc.counter_set}"
                            )
                            return
                # perDeviceNodeSelection: a device not reachable from the node is never
                # selectable (isSelectable), so it is not a candidate here.
                if s.per_device_node_selection and not self._device_matches(node, s, d):
                    continue
                c = Candidate(pool, s, d, 0)
                pool.candidates.append(c)
                pool.has_binding_conditions |= c.binding

    def remember(self, key: tuple[object, ...], device: Device, result: bool) -> None:
        if len(self.match_cache) >= self.MATCH_CACHE_LIMIT:
            self.match_cache.clear()
        self.match_cache[key] = (device, result)


# -- consumable capacity ---------------------------------------------------------------------


def _value(q: Decimal) -> int:
    """resource.Quantity.Value(): rounded up to an integer."""
    return int(q.to_integral_value(rounding=ROUND_CEILING))


def _fits_int64(q: Decimal) -> bool:
    return 0 <= q <= _INT64_MAX


def _has_range(p: CapacityPolicy) -> bool:
    return (
        p.valid_range_min is not None
        or p.valid_range_max is not None
        or p.valid_range_step is not None
    )


def _round_up_range(req: Decimal, lo: Decimal, step: Decimal | None) -> Decimal:
    if req < lo:
        return lo
    if step is None:
        return req
    # kube's int64 path (Value() rounds each up), else exact arithmetic.
    if _fits_int64(req) and _fits_int64(lo) and _fits_int64(step) and _value(step) > 0:
        r, m, st = _value(req), _value(lo), _value(step)
        n = -((r - m) // -st)
        if n == 0 or st <= (_INT64_MAX - m) // n:
            return Decimal(m + st * n)
    n_exact = ((req - lo) / step).to_integral_value(rounding=ROUND_CEILING)
    return lo + n_exact * step


def _consumed(requested: Decimal | None, cap: Capacity) -> Decimal:
    """calculateConsumedCapacity: what one allocation takes of this capacity."""
    p = cap.policy
    if requested is None:
        return p.default if p is not None and p.default is not None else cap.value
    if p is None:
        return requested
    if p.valid_range_min is not None:
        return _round_up_range(requested, p.valid_range_min, p.valid_range_step)
    if p.valid_values:
        return next((v for v in p.valid_values if requested <= v), requested)
    return requested


def _violates(val: Decimal, p: CapacityPolicy | None) -> bool:
    if p is None or (p.default is not None and val == p.default):
        return False
    if _has_range(p):
        if p.valid_range_max is not None and val > p.valid_range_max:
            return True
        step = p.valid_range_step
        if step is not None:
            lo = p.valid_range_min if p.valid_range_min is not None else Decimal(0)
            if _fits_int64(val) and _fits_int64(lo) and _fits_int64(step) and _value(step) > 0:
                return (_value(val) - _value(lo)) % _value(step) != 0
            return (val - lo) % step != 0
        return False
    if p.valid_values:
        return val not in p.valid_values
    return False


def _resolve_capacity_name(name: str, driver: str, capacity: Mapping[str, Capacity]) -> str | None:
    # An unqualified name belongs to the driver's domain (the model stores device capacity
    # names qualified, a claim may write them either way).
    if name in capacity:
        return name
    if "/" not in name and f"{driver}/{name}" in capacity:
        return f"{driver}/{name}"
    domain, _, ident = name.partition("/")
    if domain == driver and ident in capacity:
        return ident
    return None


def _resolve_requests(
    requests: Mapping[str, Decimal], driver: str, capacity: Mapping[str, Capacity]
) -> dict[str, Decimal] | None:
    out: dict[str, Decimal] = {}
    for name, q in requests.items():
        key = _resolve_capacity_name(name, driver, capacity)
        if key is None:
            return None  # kube: "some requested capacity has not been defined", skip device
        out[key] = q
    return out


# Per capacity of a device: (name, what one allocation consumes, the capacity's value,
# whether that consumption violates the request policy). None: a requested capacity the
# device does not have.
ConsumptionPlan = tuple[tuple[str, Decimal, Decimal, bool], ...] | None


def consumption_plan(
    requests: Mapping[str, Decimal], driver: str, device: Device
) -> ConsumptionPlan:
    """What one allocation of `device` for a request with these capacity requests takes:
    fixed by the request and the device, so it is computed once (the allocation state only
    adds up)."""
    resolved = _resolve_requests(requests, driver, device.capacity) if requests else {}
    if resolved is None:
        return None
    plan = []
    for name, cap in device.capacity.items():
        consumed = _consumed(resolved.get(name), cap)
        plan.append((name, consumed, cap.value, _violates(consumed, cap.policy)))
    return tuple(plan)


def plan_fits(
    plan: ConsumptionPlan,
    current: Mapping[str, Decimal] | None,
    allocating: Mapping[str, Decimal] | None,
) -> bool:
    """CmpRequestOverCapacity: every capacity of the device, requested or not, must stay
    within its value given what is consumed already and what this run is taking."""
    if plan is None:
        return False
    for name, consumed, value, violated in plan:
        if violated:
            return False
        total = consumed
        if current:
            total += current.get(name, Decimal(0))
        if allocating:
            total += allocating.get(name, Decimal(0))
        if total > value:
            return False
    return True


def consumed_capacity(
    requests: Mapping[str, Decimal], driver: str, device: Device
) -> dict[str, Decimal]:
    """GetConsumedCapacityFromRequest: what one share of a multi-allocation device takes,
    for every capacity the device has (what the result's consumedCapacity says)."""
    resolved = _resolve_requests(requests, driver, device.capacity) or {}
    return {name: _consumed(resolved.get(name), cap) for name, cap in device.capacity.items()}


# -- taints and constraints ------------------------------------------------------------------


def _tolerates(t: Toleration, key: str, value: str, effect: str) -> bool:
    # resourceclaim.ToleratesTaint.
    if t.effect and t.effect != effect:
        return False
    if t.key and t.key != key:
        return False
    if t.operator in ("", "Equal"):
        return t.value == value
    return t.operator == "Exists"


def _taint_blocks(device: Device, tolerations: tuple[Toleration, ...]) -> bool:
    for taint in device.taints:
        # Only the known effects prevent allocation; "None" and unknown ones are ignored.
        if taint.effect in _BLOCKING_TAINT_EFFECTS and not any(
            _tolerates(t, taint.key, taint.value, taint.effect) for t in tolerations
        ):
            return True
    return False


class _Constraint:
    __slots__ = ("attribute", "distinct", "names", "values")

    def __init__(self, c: DeviceConstraint) -> None:
        self.names = frozenset(c.requests)
        self.distinct = not c.match_attribute
        self.attribute = c.match_attribute or c.distinct_attribute
        self.values: list[Attribute] = []

    def applies(self, base: str, sub: str) -> bool:
        if not self.names:
            return True
        return base in self.names or (bool(sub) and f"{base}/{sub}" in self.names)

    def add(self, base: str, sub: str, device: Device) -> bool:
        if not self.applies(base, sub):
            return True
        attr = device.attributes.get(self.attribute)
        if attr is None:
            return False
        if self.distinct:
            # Attributes of different types never collide (kube compares like with like).
            if attr in self.values:
                return False
        elif self.values and attr != self.values[0]:
            return False
        self.values.append(attr)
        return True

    def remove(self, base: str, sub: str) -> None:
        if self.applies(base, sub):
            self.values.pop()


# -- the allocator ---------------------------------------------------------------------------


class _FatalError(Exception):
    pass


class _MaxSizeError(Exception):
    pass


class _TimeoutError(Exception):
    pass


Prefer = Callable[[DeviceId, Device], Any]


def _claim_ref(claim: ResourceClaim) -> str:
    # klog.KObj: "namespace/name", or the name alone.
    return f"{claim.namespace}/{claim.name}" if claim.namespace else claim.name


class _Req:
    """A request, or one subrequest of a firstAvailable request."""

    __slots__ = (
        "admin",
        "all_devices",
        "base",
        "cache",
        "capacity",
        "capacity_key",
        "cls",
        "cls_compiled",
        "full",
        "key",
        "name",
        "num_devices",
        "sel_compiled",
        "sub",
        "sub_name",
        "tolerations",
    )

    def __init__(self, request: DeviceRequest, sub: DeviceSubRequest, cls: DeviceClass) -> None:
        self.sub = sub
        self.cls = cls
        self.base = request.name
        self.sub_name = sub.name if request.first_available else ""
        self.full = f"{self.base}/{self.sub_name}" if self.sub_name else self.base
        self.name = self.sub_name or self.base
        # Subrequests never have admin access (kube's deviceSubRequestAccessor).
        self.admin = sub.admin_access and not request.first_available
        self.tolerations = sub.tolerations
        self.capacity = sub.capacity_requests
        self.capacity_key = tuple(sorted(self.capacity.items()))
        self.num_devices = sub.count
        self.all_devices: list[Candidate] | None = None
        self.key: tuple[object, ...] = (cls.name, cls.selectors, sub.selectors)
        self.cls_compiled: list[Any] = []
        self.sel_compiled: list[Any] = []
        self.cache: dict[int, bool] = {}  # candidate order -> selectable and static fit


@dataclass(slots=True)
class _Result:
    req: _Req
    cand: Candidate
    consumed: dict[str, Decimal] | None


class Allocator:
    """kube's Allocator for one pod's claims: `allocate` once per candidate node.

    `classes` by name; `in_use` what allocated claims (of any scheduler, and in-flight ones)
    hold; `selectors` the CEL evaluator; `timeout` (seconds of search per node, kube's
    filter timeout) and `max_steps` (search steps per node) bound the work;
    `new_share_id` makes the shareID of a multi-allocation result (kube: a random UUID).

    Not thread-safe (kube's is): the claims' validated requests are kept between calls and
    reused by each node's search, so call `allocate` from one thread at a time."""

    def __init__(
        self,
        classes: Mapping[str, DeviceClass],
        index: SliceIndex,
        in_use: InUse,
        selectors: SelectorEvaluator,
        *,
        timeout: float | None = DEFAULT_TIMEOUT_SECONDS,
        max_steps: int | None = None,
        new_share_id: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        self.classes = classes
        self.index = index
        self.in_use = in_use
        self.selectors = selectors
        self.timeout = timeout
        self.max_steps = max_steps
        self.new_share_id = new_share_id
        self._compiled: dict[str, tuple[Any, str | None]] = {}
        # id(claim) -> (claim, its requests or why it cannot be allocated)
        self._prepared: dict[int, tuple[ResourceClaim, list[list[_Req]] | str]] = {}
        self.steps = 0  # search steps of the last allocate (kube's numAllocateOneInvocations)

    def allocate(
        self,
        node: Node,
        claims: Sequence[ResourceClaim],
        prefer: Prefer | None = None,
    ) -> tuple[AllocationResult, ...] | AllocationFailure:
        """One AllocationResult per claim (same order), or why not on this node."""
        self.steps = 0
        if not claims:
            return ()
        node_pools = self.index.pools_for(node)
        if node_pools.error:
            return AllocationFailure(
                f"gather pool information: {node_pools.error}", FailureKind.ERROR
            )
        try:
            run = _Run(self, node, node_pools, claims, prefer)
        except _FatalError as e:
            return AllocationFailure(str(e), FailureKind.ERROR)
        try:
            done = run.one(0, 0, 0, 0, False, 0)
            if done:
                return run.output(node)
        except _FatalError as e:
            return AllocationFailure(str(e), FailureKind.ERROR)
        except _TimeoutError:
            return AllocationFailure(TIMED_OUT)
        except _MaxSizeError:
            # Only the first claim can get here (later ones are caught in the search):
            # kube returns this as an error of the whole attempt.
            return AllocationFailure("allocation max size exceeded", FailureKind.ERROR)
        finally:
            self.steps = run.steps
        if any(p.invalid for p in node_pools.pools):
            return AllocationFailure(INVALID_POOLS)
        return AllocationFailure(CANNOT_ALLOCATE)

    def compile(self, expr: str, where: str, i: int) -> Any:
        got = self._compiled.get(expr)
        if got is None:
            compiled = self.selectors.compile(expr)
            # Checked once per expression: a runtime_checkable isinstance is slow.
            failed = isinstance(compiled, SelectorFailure)
            got = (compiled, compiled.message if failed else None)
            self._compiled[expr] = got
        if got[1] is not None:
            raise _FatalError(f"{where}: selector #{i}: CEL compile error: {got[1]}")
        return got[0]

    def validate(self, claim: ResourceClaim) -> str:
        """Why the claim cannot be allocated on any node ("" when it may be): a malformed
        claim, a missing or malformed class, a selector that does not compile. kube finds
        these in Filter and ends the attempt with an Error; they do not depend on the node,
        so the plugin asks once, at PreFilter."""
        try:
            self.prepare(claim)
        except _FatalError as e:
            return str(e)
        return ""

    def prepare(self, claim: ResourceClaim) -> list[list[_Req]]:
        """The claim's requests validated against the classes (kube's checks that do not
        depend on the node), kept for this claim object: allocate runs once per node."""
        got = self._prepared.get(id(claim))
        if got is None or got[0] is not claim:
            try:
                got = (claim, self._validate_claim(claim))
            except _FatalError as e:
                got = (claim, str(e))
            self._prepared[id(claim)] = got
        if isinstance(got[1], str):
            raise _FatalError(got[1])
        return got[1]

    def _validate_claim(self, claim: ResourceClaim) -> list[list[_Req]]:
        ref = _claim_ref(claim)
        if claim.errors:
            raise _FatalError(f"claim {ref}: {'; '.join(claim.errors)}")
        out: list[list[_Req]] = []
        for request in claim.requests:
            if not request.alternatives:
                raise _FatalError(
                    f"claim {ref}, request {request.name}: missing device class name"
                    " (unsupported request type?)"
                )
            out.append(
                [self._validate_request(claim, request, sub) for sub in request.alternatives]
            )
        for i, c in enumerate(claim.constraints):
            if not c.match_attribute and not c.distinct_attribute:
                raise _FatalError(
                    f"claim {ref}, constraint #{i}: empty constraint (unsupported constraint type?)"
                )
        return out

    def _validate_request(
        self, claim: ResourceClaim, request: DeviceRequest, sub: DeviceSubRequest
    ) -> _Req:
        ref = _claim_ref(claim)
        name = sub.name if request.first_available else request.name
        for i, expr in enumerate(sub.selectors):
            if not expr:
                raise _FatalError(
                    f"claim {ref}, request {name}, selector #{i}: CEL expression empty"
                    " (unsupported selector type?)"
                )
        if not sub.device_class:
            raise _FatalError(
                f"claim {ref}, request {name}: missing device class name (unsupported request"
                " type?)"
            )
        cls = self.classes.get(sub.device_class)
        if cls is None:
            raise _FatalError(
                f"claim {ref}, request {name}: could not retrieve device class"
                f' {sub.device_class}: deviceclass.resource.k8s.io "{sub.device_class}"'
                " not found"
            )
        if cls.errors:
            raise _FatalError(f"class {cls.name}: {'; '.join(cls.errors)}")
        rd = _Req(request, sub, cls)
        rd.cls_compiled = [
            self.compile(e, f"class {cls.name}", i) for i, e in enumerate(cls.selectors)
        ]
        rd.sel_compiled = [self.compile(e, f"claim {ref}", i) for i, e in enumerate(sub.selectors)]
        if sub.mode not in (AllocationMode.EXACT_COUNT, AllocationMode.ALL):
            raise _FatalError(
                f"claim {ref}, request {name}: unsupported count mode {sub.mode.value}"
            )
        return rd


class _Run:
    """One Allocate call: the search state (kube's `allocator`)."""

    def __init__(
        self,
        owner: Allocator,
        node: Node,
        node_pools: NodePools,
        claims: Sequence[ResourceClaim],
        prefer: Prefer | None,
    ) -> None:
        self.owner = owner
        self.in_use = owner.in_use
        self.claims = claims
        self.steps = 0
        self.deadline = None if owner.timeout is None else time.monotonic() + owner.timeout
        cands = node_pools.candidates
        if prefer is not None:
            cands = sorted(cands, key=lambda c: prefer(c.id, c.device))
        self.cands = cands
        self.allocating: dict[DeviceId, set[int]] = {}
        self.allocating_capacity: dict[DeviceId, dict[str, Decimal]] = {}
        self.counters: dict[PoolId, dict[tuple[str, str], Decimal]] = {}
        self.available: dict[PoolId, dict[tuple[str, str], Decimal]] = {}
        self.results: list[list[_Result]] = [[] for _ in claims]
        self.selected: dict[tuple[int, int], int] = {}
        self.reqs: list[list[list[_Req]]] = []
        self.constraints: list[list[_Constraint]] = []
        for claim in claims:
            prepared = owner.prepare(claim)
            self.constraints.append([_Constraint(c) for c in claim.constraints])
            self.reqs.append(prepared)
            min_devices = 0
            for alts in prepared:
                for rd in alts:
                    rd.cache = {}
                    if rd.sub.mode is AllocationMode.ALL:
                        self._all_devices(claim, rd, node_pools)
                min_devices += min(rd.num_devices for rd in alts)
            if min_devices > ALLOCATION_RESULTS_MAX_SIZE:
                raise _FatalError(
                    f"claim {_claim_ref(claim)}: number of requested devices {min_devices}"
                    f" exceeds the claim limit of {ALLOCATION_RESULTS_MAX_SIZE}"
                )

    def _all_devices(self, claim: ResourceClaim, rd: _Req, node_pools: NodePools) -> None:
        """validateDeviceRequest for allocationMode All: every selectable device of the
        node's pools, and none of them may be incomplete or invalid."""
        ref = _claim_ref(claim)
        devices: list[Candidate] = []
        for pool in node_pools.pools:
            if pool.incomplete:
                raise _FatalError(
                    f"claim {ref}, request {rd.name}: asks for all devices, but resource pool"
                    f" {pool.name} is currently being updated"
                )
            if pool.invalid:
                raise _FatalError(
                    f"claim {ref}, request {rd.name}: asks for all devices, but resource pool"
                    f" {pool.name} is currently invalid"
                )
            # A multi-allocation device must also have the capacity left (kube checks every
            # device here, before anything is being allocated).
            devices.extend(
                c
                for c in pool.candidates
                if self._selectable(rd, c, claim) and (not c.multi or self._capacity_fits(rd, c))
            )
        rd.all_devices = devices
        rd.num_devices = len(devices)

    # -- per-device checks -----------------------------------------------------------------

    def _selectable(self, rd: _Req, c: Candidate, claim: ResourceClaim) -> bool:
        """isSelectable plus the capacity check where it cannot change during the search
        (a single-allocation device: only this request takes of its capacity)."""
        got = rd.cache.get(c.order)
        if got is not None:
            return got
        index = self.owner.index
        # The selectors' verdict, and for a single-allocation device nobody holds capacity
        # of, the capacity check too, depend only on the device and the request: cached for
        # as long as the slices are (across nodes and pods).
        static_capacity = not c.multi and c.id not in self.in_use.consumed_capacity
        key = (*rd.key, rd.capacity_key if static_capacity else None, id(c.device))
        hit = index.match_cache.get(key)
        if hit is not None and hit[0] is c.device:
            got = hit[1]
        else:
            got = self._eval(rd.cls_compiled, c, f"class {rd.cls.name}") and self._eval(
                rd.sel_compiled, c, f"claim {_claim_ref(claim)}"
            )
            if got and static_capacity:
                got = self._capacity_fits(rd, c)
            index.remember(key, c.device, got)
        if got and not c.multi and not static_capacity:
            got = self._capacity_fits(rd, c)
        rd.cache[c.order] = got
        return got

    def _eval(self, compiled: list[Any], c: Candidate, where: str) -> bool:
        driver = c.id[0]
        for i, expr in enumerate(compiled):
            got = self.owner.selectors.matches(expr, driver, c.device)
            if got is True:
                continue
            if got is not False and isinstance(got, SelectorFailure):
                raise _FatalError(
                    f"{where}: selector #{i} on device {'/'.join(c.id)}: CEL runtime error:"
                    f" {got.message}"
                )
            return False
        return True

    def _plan(self, rd: _Req, c: Candidate) -> ConsumptionPlan:
        index = self.owner.index
        key = (rd.capacity_key, id(c.device))
        hit = index.plan_cache.get(key)
        if hit is not None and hit[0] is c.device:
            return hit[1]
        plan = consumption_plan(rd.capacity, c.id[0], c.device)
        if len(index.plan_cache) >= index.MATCH_CACHE_LIMIT:
            index.plan_cache.clear()
        index.plan_cache[key] = (c.device, plan)
        return plan

    def _capacity_fits(self, rd: _Req, c: Candidate) -> bool:
        if not c.device.capacity and not rd.capacity:
            return True
        return plan_fits(
            self._plan(rd, c),
            self.in_use.consumed_capacity.get(c.id),
            self.allocating_capacity.get(c.id),
        )

    def _device_in_use(self, dev: DeviceId) -> bool:
        return dev in self.in_use.devices or bool(self.allocating.get(dev))

    def _take_counters(self, c: Candidate) -> bool:
        """checkAvailableCounters: add the device's consumption, keep it if every counter of
        the pool is still within what allocated devices left."""
        pid = c.pool.id
        avail = self.available.get(pid)
        if avail is None:
            used = self.in_use.consumed_counters
            avail = {
                k: total - used.get((pid[0], pid[1], k[0], k[1]), Decimal(0))
                for k, total in c.pool.counters.items()
            }
            self.available[pid] = avail
        taken = self.counters.setdefault(pid, {})
        for k, q in c.counters:
            taken[k] = taken.get(k, Decimal(0)) + q
        for k, left in avail.items():
            if left < taken.get(k, Decimal(0)):
                self._release_counters(c)
                return False
        return True

    def _release_counters(self, c: Candidate) -> None:
        taken = self.counters[c.pool.id]
        for k, q in c.counters:
            taken[k] -= q

    def _allocate_device(
        self, ci: int, rd: _Req, c: Candidate, must: bool
    ) -> Callable[[], None] | None:
        """allocateDevice: take `c` for `rd` if it may be taken now; the undo on success."""
        dev = c.id
        if not c.multi and rd.admin and ci in self.allocating.get(dev, ()):
            return None
        if not rd.admin and self._device_in_use(dev):
            return None
        # A shared device already in use has its counters taken already.
        took_counters = False
        if c.counters and not (
            c.multi and (dev in self.in_use.consumed_capacity or dev in self.allocating_capacity)
        ):
            if not self._take_counters(c):
                return None
            took_counters = True
        if c.device.taints and _taint_blocks(c.device, rd.tolerations):
            if took_counters:
                self._release_counters(c)
            return None
        constraints = self.constraints[ci]
        for i, con in enumerate(constraints):
            if not con.add(rd.base, rd.sub_name, c.device):
                for prev in constraints[:i]:
                    prev.remove(rd.base, rd.sub_name)
                if took_counters:
                    self._release_counters(c)
                if must:
                    raise _FatalError(
                        f"claim {_claim_ref(self.claims[ci])}, request {rd.name}:"
                        f" cannot add device {'/'.join(dev)} because a claim constraint would"
                        " not be satisfied"
                    )
                return None
        consumed: dict[str, Decimal] | None = None
        if c.multi:
            if not self._capacity_fits(rd, c):
                for con in constraints:
                    con.remove(rd.base, rd.sub_name)
                if took_counters:
                    self._release_counters(c)
                return None
            consumed = {name: q for name, q, _, _ in self._plan(rd, c) or ()}
            per = self.allocating_capacity.setdefault(dev, {})
            for name, q in consumed.items():
                per[name] = per.get(name, Decimal(0)) + q
        else:
            self.allocating.setdefault(dev, set()).add(ci)
        results = self.results[ci]
        results.append(_Result(rd, c, consumed))

        def undo() -> None:
            results.pop()
            for con in constraints:
                con.remove(rd.base, rd.sub_name)
            if consumed is not None:
                per = self.allocating_capacity[dev]
                for name, q in consumed.items():
                    per[name] -= q
                if not any(per.values()):
                    del self.allocating_capacity[dev]
            else:
                self.allocating[dev].discard(ci)
            if took_counters:
                self._release_counters(c)

        return undo

    # -- the search (allocateOne) ----------------------------------------------------------

    def _tick(self) -> None:
        self.steps += 1
        limit = self.owner.max_steps
        if limit is not None and self.steps > limit:
            raise _TimeoutError
        deadline = self.deadline
        if deadline is not None and self.steps % _CLOCK_EVERY == 0 and time.monotonic() > deadline:
            raise _TimeoutError

    def one(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int) -> bool:
        self._tick()
        if ci >= len(self.claims):
            return True
        claim_reqs = self.reqs[ci]
        if ri >= len(claim_reqs):
            try:
                return self.one(ci + 1, 0, 0, 0, False, 0)
            except _MaxSizeError:
                # A later claim needs more devices than fit; another choice here may
                # let one of its subrequests with fewer devices fit.
                return False
        alts = claim_reqs[ri]
        if not in_sub and self.claims[ci].requests[ri].first_available:
            all_exceeded = True
            for s in range(len(alts)):
                try:
                    ok = self.one(ci, ri, s, 0, True, 0)
                except _MaxSizeError:
                    continue
                all_exceeded = False
                if ok:
                    self.selected[(ci, ri)] = s
                    return True
            if all_exceeded:
                raise _MaxSizeError
            return False
        rd = alts[si]
        if rd.all_devices is not None and not rd.all_devices:
            return False  # "All" needs at least one device
        if di >= rd.num_devices:
            return self.one(ci, ri + 1, 0, 0, False, 0)
        if len(self.results[ci]) + rd.num_devices - di > ALLOCATION_RESULTS_MAX_SIZE:
            raise _MaxSizeError
        if rd.all_devices is not None:
            undo = self._allocate_device(ci, rd, rd.all_devices[di], True)
            if undo is None:
                return False
            try:
                done = self.one(ci, ri, si, di + 1, in_sub, 0)
            except BaseException:
                undo()
                raise
            if not done:
                undo()
            return done
        claim = self.claims[ci]
        cands = self.cands
        for idx in range(start, len(cands)):
            c = cands[idx]
            if rd.admin:
                if ci in self.allocating.get(c.id, ()):
                    continue
            elif self._device_in_use(c.id):
                continue
            if not self._selectable(rd, c, claim):
                continue
            if c.multi and not self._capacity_fits(rd, c):
                continue
            undo = self._allocate_device(ci, rd, c, False)
            if undo is None:
                continue
            try:
                done = self.one(ci, ri, si, di + 1, in_sub, idx + 1)
            except BaseException:
                undo()
                raise
            if done:
                return True
            undo()
        return False

    # -- the results -----------------------------------------------------------------------

    def output(self, node: Node) -> tuple[AllocationResult, ...]:
        out: list[AllocationResult] = []
        for ci, claim in enumerate(self.claims):
            results = tuple(
                DeviceResult(
                    request=r.req.full,
                    driver=r.cand.id[0],
                    pool=r.cand.id[1],
                    device=r.cand.id[2],
                    admin_access=r.req.admin,
                    tolerations=r.req.tolerations,
                    share_id=self.owner.new_share_id() if r.cand.multi else "",
                    consumed_capacity=r.consumed or {},
                    binding_conditions=r.cand.device.binding_conditions,
                    binding_failure_conditions=r.cand.device.binding_failure_conditions,
                )
                for r in self.results[ci]
            )
            out.append(
                AllocationResult(
                    results=results,
                    config=self._configs(ci, claim),
                    node_selector=self._node_selector(ci, node),
                )
            )
        return tuple(out)

    def _configs(self, ci: int, claim: ResourceClaim) -> tuple[Mapping[str, object], ...]:
        configs: list[dict[str, Any]] = []
        # Each class's configs once, naming every request (or chosen subrequest) of it.
        by_class: dict[str, tuple[int, int]] = {}
        for ri, alts in enumerate(self.reqs[ci]):
            rd = alts[self.selected.get((ci, ri), 0)]
            span = by_class.get(rd.cls.name)
            if span is not None:
                for i in range(*span):
                    configs[i]["requests"].append(rd.full)
                continue
            begin = len(configs)
            for cfg in rd.cls.config:
                configs.append({**cfg, "source": "FromClass", "requests": [rd.full]})
            by_class[rd.cls.name] = (begin, len(configs))
        for cfg in claim.config:
            names = cfg.get("requests") or []
            rest = {k: v for k, v in cfg.items() if k != "requests"}
            if not names:
                configs.append({**rest, "source": "FromClaim"})
                continue
            if not isinstance(names, list | tuple):
                raise _FatalError(f"claim {_claim_ref(claim)}: config requests must be a list")
            for ri, request in enumerate(claim.requests):
                # As kube does: one entry per request the config names.
                if request.name in names:
                    configs.append({**rest, "source": "FromClaim", "requests": list(names)})
                    continue
                if not request.first_available:
                    continue
                sub = request.alternatives[self.selected.get((ci, ri), 0)]
                if f"{request.name}/{sub.name}" in names:
                    configs.append({**rest, "source": "FromClaim", "requests": list(names)})
        # A config for every request names none ("empty means all").
        for cfg2 in configs:
            if "requests" in cfg2 and len(cfg2["requests"]) == len(claim.requests):
                del cfg2["requests"]
        return tuple(configs)

    def _node_selector(self, ci: int, node: Node) -> Mapping[str, object] | None:
        """createNodeSelector: pinned to the node when a device is local to it (or binds to
        it), else the union of the network-attached devices' selectors, else none."""
        fields: list[dict[str, Any]] = []
        exprs: list[dict[str, Any]] = []
        for r in self.results[ci]:
            c = r.cand
            if c.node_name or c.device.binds_to_node:
                return {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": _NAME_FIELD, "operator": "In", "values": [node.name]}
                            ]
                        }
                    ]
                }
            sel = c.node_selector
            if sel is None:
                continue
            terms = sel.get("nodeSelectorTerms") or []
            if not isinstance(terms, list | tuple) or len(terms) > 1:
                raise _FatalError(
                    f"create NodeSelector for claim {self.claims[ci].name}: unsupported"
                    f" ResourceSlice.NodeSelector with {len(terms)} terms"
                    if isinstance(terms, list | tuple)
                    else f"create NodeSelector for claim {self.claims[ci].name}: malformed"
                    " ResourceSlice.NodeSelector"
                )
            if terms:
                term = terms[0]
                if isinstance(term, Mapping):
                    _add_requirements(term.get("matchFields") or [], fields)
                    _add_requirements(term.get("matchExpressions") or [], exprs)
        if not fields and not exprs:
            return None
        merged: dict[str, Any] = {}
        if fields:
            merged["matchFields"] = fields
        if exprs:
            merged["matchExpressions"] = exprs
        return {"nodeSelectorTerms": [merged]}


def _add_requirements(src: object, dst: list[dict[str, Any]]) -> None:
    # The slice's selector parsed when its pool was gathered, so the shapes hold here.
    for req in src if isinstance(src, list | tuple) else ():
        if not isinstance(req, Mapping):
            continue
        values = frozenset(req.get("values") or [])
        if not any(
            d.get("key") == req.get("key")
            and d.get("operator") == req.get("operator")
            and frozenset(d.get("values") or []) == values
            for d in dst
        ):
            dst.append(dict(req))

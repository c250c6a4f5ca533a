"""NodeResourcesFit (PreFilter, Filter, PreScore, Score): pod count, cpu, memory and every
other requested resource (extended resources, ephemeral-storage, hugepages-*).

Filter and Score are whole-cluster numpy expressions over the snapshot's columns; the
integer arithmetic is kube-scheduler's (Go int64 division), so scores match it point for
point on the same inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState, StateKey
from gpusched.framework.interfaces import (
    MAX_NODE_SCORE,
    FilterResult,
    Handle,
    Mask,
    PreFilterResult,
    Rows,
    Scores,
    ScoreUnit,
)
from gpusched.framework.snapshot import NodeColumns
from gpusched.framework.status import Status
from gpusched.kernels import resource_fit_nb, resource_fit_np
from gpusched.kernels.dispatch import pick
from gpusched.model.keys import GPU_RESOURCE
from gpusched.model.pod import PodInfo
from gpusched.plugins.helper.resources import allocatable_requested
from gpusched.plugins.node_resources_fit.args import (
    LEAST_ALLOCATED,
    MAX_CUSTOM_SCORE,
    MAX_UTILIZATION,
    MOST_ALLOCATED,
    NodeResourcesFitArgs,
    is_extended_resource,
)

# Reasons in kube-scheduler's order (fitsRequest checks pods, then cpu, memory and the
# others); a row failing several counts under each, as kube-scheduler counts it.
REASON_PODS = "Too many pods"
REASON_CPU = "Insufficient cpu"
REASON_MEMORY = "Insufficient memory"
EPHEMERAL_STORAGE = "ephemeral-storage"

# pkg/scheduler/util: what scoring assumes a container without a request uses, so
# best-effort pods do not all pile onto one node (DefaultMilliCPURequest,
# DefaultMemoryRequest).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

_MAX = int(MAX_NODE_SCORE)

resource_fit = pick(resource_fit_nb, resource_fit_np)
# The kernel takes int64 requests; a larger one (a malformed pod) goes the NumPy way.
_INT64_LIMIT = 2**63


@dataclass(frozen=True, slots=True)
class PodRequests:
    """What the pod asks for: exact requests for Filter, non-zero ones for Score."""

    cpu_milli: int
    memory_bytes: int
    score_cpu_milli: int
    score_memory_bytes: int
    gpu_cards: int
    # The other resources Filter checks (ignored extended resources left out), in
    # kube-scheduler's order: ephemeral-storage, then the rest by name.
    other: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, pod: PodInfo, args: NodeResourcesFitArgs | None = None) -> PodRequests:
        req = pod.request
        return cls(
            cpu_milli=req.cpu_milli,
            memory_bytes=req.memory_bytes,
            score_cpu_milli=req.cpu_milli or DEFAULT_MILLI_CPU_REQUEST,
            score_memory_bytes=req.memory_bytes or DEFAULT_MEMORY_REQUEST,
            gpu_cards=req.gpu_cards,
            other=_checked(req.other, args) if req.other else (),
        )


def _checked(
    other: tuple[tuple[str, int], ...], args: NodeResourcesFitArgs | None
) -> tuple[tuple[str, int], ...]:
    names = args.ignored_resources if args is not None else ()
    groups = args.ignored_resource_groups if args is not None else ()
    kept = [
        (name, amount)
        for name, amount in other
        if not (is_extended_resource(name) and (name in names or name.split("/", 1)[0] in groups))
    ]
    kept.sort(key=lambda kv: (kv[0] != EPHEMERAL_STORAGE, kv[0]))
    return tuple(kept)


STATE: StateKey[PodRequests] = StateKey("NodeResourcesFit/requests")

I64 = NDArray[np.int64]


def _go_div(a: I64, b: I64) -> I64:
    """Go's int64 division truncates toward zero; numpy's // floors. b > 0 here."""
    q: I64 = np.abs(a) // b
    return np.where(a < 0, -q, q)


class NodeResourcesFit:
    name: ClassVar[str] = "NodeResourcesFit"
    # The default strategy's; __init__ words the others (an instance attribute).
    score_unit: ScoreUnit = ScoreUnit(
        "percent (int, 0-100)",
        "weighted mean over resources of the share left free after the pod (LeastAllocated)",
    )
    Args: ClassVar[type[NodeResourcesFitArgs]] = NodeResourcesFitArgs

    def __init__(self, args: NodeResourcesFitArgs | None, handle: Handle) -> None:
        self.args = args if args is not None else NodeResourcesFitArgs()
        self.handle = handle
        s = self.args.scoring_strategy
        self.strategy = s.type
        if self.strategy == MOST_ALLOCATED:
            self.score_unit = ScoreUnit(
                "percent (int, 0-100)",
                "weighted mean over resources of the share requested once the pod is placed",
            )
        elif self.strategy != LEAST_ALLOCATED:
            self.score_unit = ScoreUnit(
                "points (int, 0-100)",
                "weighted mean over resources of the requestedToCapacityRatio shape at the"
                " resource's utilization once the pod is placed",
            )
        self.resources = tuple((r.name, int(r.weight)) for r in s.resources)
        shape = s.requested_to_capacity_ratio.shape if s.requested_to_capacity_ratio else ()
        # Shape scores are 0..10 in the API; kube-scheduler scales them to 0..100.
        scale = _MAX // MAX_CUSTOM_SCORE
        self.shape_x = np.array([p.utilization for p in shape], np.int64)
        self.shape_y = np.array([p.score * scale for p in shape], np.int64)

    # -- PreFilter / Filter ----------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        # No whole-pod rejection even for a resource no node offers: kube-scheduler lets each
        # node say "Insufficient <name>" (unresolvable there) in Filter, after the Filters
        # before it, and the FailedScheduling counts follow that order.
        state.write(STATE, PodRequests.of(pod, self.args))
        return None, Status()

    def _requests(self, state: CycleState, pod: PodInfo) -> PodRequests:
        got = state.get(STATE)
        return got if got is not None else PodRequests.of(pod, self.args)

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        req = self._requests(state, pod)
        snap = self.handle.snapshot
        n = len(candidates)
        if not req.other and max(req.cpu_milli, req.memory_bytes) < _INT64_LIMIT:
            return self._fit_kernel(req, snap, candidates)
        # One row of `hits` per check, written in place (no per-check array, no stack): at
        # 70 % full most pods meet some node without room, so the reasons are always built.
        # kube-scheduler skips a resource the pod does not request (so a zero-request pod
        # still fits a node that is over-committed on it).
        checks: list[tuple[str, Mask | None]] = [(REASON_PODS, None)]
        if req.cpu_milli > 0:
            checks.append((REASON_CPU, snap.node_cpu_alloc[:n] < req.cpu_milli))
        if req.memory_bytes > 0:
            checks.append((REASON_MEMORY, snap.node_mem_alloc[:n] < req.memory_bytes))
        hits = np.empty((len(checks) + len(req.other), n), np.bool_)
        np.less(snap.node_pods_free[:n], 1, out=hits[0])
        i = 1
        if req.cpu_milli > 0:
            np.less(snap.node_cpu_free[:n], req.cpu_milli, out=hits[i])
            i += 1
        if req.memory_bytes > 0:
            np.less(snap.node_mem_free[:n], req.memory_bytes, out=hits[i])
            i += 1
        for name, amount in req.other:
            reason, short, never = self._short_of(snap, n, name, amount)
            hits[i] = short
            checks.append((reason, never))
            i += 1
        bad = np.logical_or.reduce(hits, axis=0) if len(hits) > 1 else hits[0].copy()
        bad &= candidates
        if not np.count_nonzero(bad):
            return FilterResult(candidates)
        # Every reason that holds for a row counts (kube-scheduler's status carries them
        # all), and a request beyond the row's allocatable is unresolvable there
        # (InsufficientResource.Unresolvable): no preemption frees what the node never had.
        unresolvable = np.zeros(n, np.bool_)
        for _reason, beyond in checks:
            if beyond is not None:
                unresolvable |= beyond
        unresolvable &= bad
        return FilterResult(
            candidates & ~bad,
            tuple(reason for reason, _never in checks),
            unresolvable=unresolvable,
            hits=hits,
        )

    @staticmethod
    def _fit_kernel(req: PodRequests, snap: NodeColumns, candidates: Mask) -> FilterResult:
        """Pod slots, cpu and memory in one pass (kernels/resource_fit.py): the same result
        as the NumPy path below, which pods with other resources take."""
        n = len(candidates)
        checks = [REASON_PODS]
        if req.cpu_milli > 0:
            checks.append(REASON_CPU)
        if req.memory_bytes > 0:
            checks.append(REASON_MEMORY)
        hits = np.empty((len(checks), n), np.bool_)
        feasible = np.empty(n, np.bool_)
        unresolvable = np.empty(n, np.bool_)
        rejected = resource_fit(
            candidates,
            snap.node_pods_free,
            snap.node_cpu_free,
            snap.node_mem_free,
            snap.node_cpu_alloc,
            snap.node_mem_alloc,
            req.cpu_milli,
            req.memory_bytes,
            hits,
            feasible,
            unresolvable,
        )
        if not rejected:
            return FilterResult(candidates)
        return FilterResult(feasible, tuple(checks), unresolvable=unresolvable, hits=hits)

    @staticmethod
    def _short_of(snap: NodeColumns, n: int, name: str, amount: int) -> tuple[str, Mask, Mask]:
        """An other resource's check: short of free amount, and never enough (allocatable
        below the request, or the resource absent from every node's columns)."""
        col = snap.other_column(name)
        if col < 0:
            missing = np.ones(n, np.bool_)
            return f"Insufficient {name}", missing, missing
        return (
            f"Insufficient {name}",
            snap.node_other_free[:n, col] < amount,
            snap.node_other_alloc[:n, col] < amount,
        )

    # -- PreScore / Score ------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Status:
        if state.get(STATE) is None:
            state.write(STATE, PodRequests.of(pod, self.args))
        return Status()

    @staticmethod
    def _alloc_requested(
        snap: NodeColumns,
        rows: Rows,
        name: str,
        req: PodRequests,
        pod_other: tuple[tuple[str, int], ...],
    ) -> tuple[I64, I64]:
        """(allocatable, requested after placing the pod) per row, kube-scheduler's
        calculateResourceAllocatableRequest with the non-zero cpu/memory defaults
        (plugins/helper/resources.py). allocatable 0 means "do not score this resource on
        this row". Other resources come from the pod's full request (ignoredResources only
        affect Filter)."""
        if name == "cpu":
            amount = req.score_cpu_milli
        elif name == "memory":
            amount = req.score_memory_bytes
        elif name == GPU_RESOURCE:
            amount = req.gpu_cards
        else:
            amount = dict(pod_other).get(name, 0)
        return allocatable_requested(snap, rows, name, amount)

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        req = self._requests(state, pod)
        snap = self.handle.snapshot
        node_score = np.zeros(len(rows), np.int64)
        weight_sum = np.zeros(len(rows), np.int64)
        for name, weight in self.resources:
            alloc, requested = self._alloc_requested(snap, rows, name, req, pod.request.other)
            scored = alloc > 0
            safe = np.where(scored, alloc, 1)
            if self.strategy == LEAST_ALLOCATED:
                rs = np.where(requested > alloc, 0, ((alloc - requested) * _MAX) // safe)
            elif self.strategy == MOST_ALLOCATED:
                # Non-zero defaults can push requested past capacity: clamp, as upstream.
                rs = (np.minimum(requested, alloc) * _MAX) // safe
            else:
                util = np.where(
                    requested > alloc, MAX_UTILIZATION, (requested * MAX_UTILIZATION) // safe
                )
                rs = self._broken_linear(util)
                # RequestedToCapacityRatio leaves a resource scoring 0 out of the average.
                scored &= rs > 0
            node_score += np.where(scored, rs * weight, 0)
            weight_sum += np.where(scored, weight, 0)
        has = weight_sum > 0
        out = np.zeros(len(rows), np.float64)
        if self.strategy in (LEAST_ALLOCATED, MOST_ALLOCATED):
            out[has] = node_score[has] // weight_sum[has]
        else:
            # math.Round (half away from zero) of a non-negative ratio.
            out[has] = np.floor(node_score[has] / weight_sum[has] + 0.5)
        return out

    def _broken_linear(self, p: I64) -> I64:
        """helper.BuildBrokenLinearFunction over the configured shape, vectorised."""
        xs, ys = self.shape_x, self.shape_y
        if len(xs) == 0:
            return np.zeros_like(p)
        # First shape point with p <= x; past the last point, the last score.
        i = np.searchsorted(xs, p, side="left")
        out: I64 = np.where(i >= len(xs), ys[-1], ys[0])
        mid = (i > 0) & (i < len(xs))
        if mid.any():
            j = i[mid]
            x0, x1, y0, y1 = xs[j - 1], xs[j], ys[j - 1], ys[j]
            out[mid] = y0 + _go_div((y1 - y0) * (p[mid] - x0), x1 - x0)
        return out

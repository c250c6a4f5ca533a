"""PodTopologySpread (PreFilter, Filter, PreScore, Score, NormalizeScore).

kube-scheduler's plugin of the same name (pkg/scheduler/framework/plugins/podtopologyspread):
hard constraints (`whenUnsatisfiable: DoNotSchedule`) filter, soft ones (`ScheduleAnyway`)
score; a pod without constraints of its own gets the cluster's default constraints when it
belongs to a ReplicaSet, StatefulSet or ReplicationController.

Counting is per node: the pods (bound or assumed, not terminating) of the incoming pod's
namespace that match the constraint's selector, from the cache's pod label index
(`Handle.count_matching_pods`, as InterPodAffinity counts). Everything over nodes is
arrays: each node's domain is the dense id of its topology-key value over the snapshot's
label sets (the keys are declared watched first, as NodeAffinity declares its selector
keys), eligibility (the node carries
every constraint's key and passes nodeAffinityPolicy / nodeTaintsPolicy) is a mask, and the
per-domain sums, the skew check and the score run in one kernel each
(`gpusched/kernels/spread_filter.py`, `spread_score.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

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
from gpusched.framework.status import Status, skip, unresolvable
from gpusched.kernels.dispatch import pick
from gpusched.kernels.spread_filter import (
    SPREAD_MISSING_LABEL,
    SPREAD_SKEW,
    spread_filter_nb,
    spread_filter_np,
)
from gpusched.kernels.spread_score import spread_score_nb, spread_score_np
from gpusched.model.pod import PodInfo
from gpusched.plugins.helper.args import checked_args
from gpusched.plugins.helper.label_index import LabelIndex, RequiredEval, synced_index
from gpusched.plugins.helper.node_selector import Required, freeze, parse_required
from gpusched.plugins.helper.pod_selector import EVERYTHING, LabelSelector
from gpusched.plugins.helper.tolerations import (
    NO_EXECUTE,
    NO_SCHEDULE,
    parse_tolerations,
    tolerated,
)
from gpusched.plugins.pod_topology_spread.args import SYSTEM, PodTopologySpreadArgs
from gpusched.plugins.pod_topology_spread.constraints import (
    DO_NOT_SCHEDULE,
    HOSTNAME,
    Constraint,
    pod_constraints,
)

REASON = "node(s) didn't match pod topology spread constraints"
REASON_MISSING_LABEL = REASON + " (missing required label)"
# kube-scheduler's helper.DefaultSelector reads Services, ReplicationControllers,
# ReplicaSets and StatefulSets; gpusched watches none of them and stands the pod's
# controller (by uid) in for the controllers' selectors (README).
CONTROLLER_KINDS = frozenset({"ReplicationController", "ReplicaSet", "StatefulSet"})
_AFFINITY_CACHE_LIMIT = 1024  # distinct (nodeSelector, nodeAffinity) signatures kept

_spread_filter = pick(spread_filter_nb, spread_filter_np)
_spread_score = pick(spread_score_nb, spread_score_np)

Counts = NDArray[np.int64]


@dataclass(slots=True)
class _ScoreState:
    constraints: tuple[Constraint, ...]
    require_all: bool
    ignored: NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, np.bool_))


_FILTER: StateKey[tuple[Constraint, ...]] = StateKey("PodTopologySpread/preFilter")
_SCORE: StateKey[_ScoreState] = StateKey("PodTopologySpread/preScore")
# Per-node counts by (controller uid, selector), shared by Filter and Score of one cycle.
_COUNTS: StateKey[dict[tuple[str, LabelSelector], Counts]] = StateKey("PodTopologySpread/counts")


def _required_keys(req: Required) -> tuple[str, ...]:
    keys: dict[str, None] = dict.fromkeys(k for k, _ in req.node_selector)
    for t in req.terms or ():
        keys.update(dict.fromkeys(r.key for r in t.labels or ()))
    return tuple(keys)


def _matcher(c: Constraint) -> Callable[[PodInfo], bool]:
    """kube's countPodsMatchSelector for one constraint (the namespace is the handle's):
    terminating pods never count. Called once per pod of the namespace, so the usual
    selector shapes (a controller, matchLabels) get a closure with no generic loop."""
    uid = c.controller_uid
    if uid:
        return lambda p: p.controller[1] == uid and not p.deleting
    reqs = c.selector.requirements or ()
    if all(r.op == "In" and len(r.values) == 1 for r in reqs):
        pairs = tuple((r.key, next(iter(r.values))) for r in reqs)
        if len(pairs) == 1:
            ((key, value),) = pairs
            return lambda p: p.labels.get(key) == value and not p.deleting

        def labels_equal(p: PodInfo) -> bool:
            labels = p.labels
            for key, value in pairs:
                if labels.get(key) != value:
                    return False
            return not p.deleting

        return labels_equal
    selector = c.selector
    return lambda p: not p.deleting and selector.matches(p.labels)


@dataclass(frozen=True, slots=True)
class _Counted:
    """The pods one constraint counts, as the cache's PodMatcher: the pod's own namespace,
    the selector's anchor (so the cache reads only pods carrying that label, or the
    namespace's, whichever is fewer), and `_matcher`'s test."""

    namespaces: frozenset[str]
    anchor: tuple[str, frozenset[str] | None] | None
    test: Callable[[PodInfo], bool]

    @classmethod
    def of(cls, c: Constraint, namespace: str) -> _Counted:
        anchor = None if c.controller_uid else c.selector.anchor
        return cls(frozenset((namespace,)), anchor, _matcher(c))

    def matches(self, pod: PodInfo) -> bool:
        # The anchor's pods may be in any namespace: only this one's count.
        return pod.namespace in self.namespaces and self.test(pod)


def _self_match(c: Constraint, pod: PodInfo) -> bool:
    return bool(c.controller_uid) or c.selector.matches(pod.labels)


class PodTopologySpread:
    name: ClassVar[str] = "PodTopologySpread"
    score_unit: ClassVar[ScoreUnit] = ScoreUnit(
        "matching pods (weighted count)",
        (
            "pods matching the soft spread constraints in the node's domains, weighted per "
            "constraint; lower is better (normalisation reverses it)"
        ),
    )
    Args: ClassVar[type[PodTopologySpreadArgs]] = PodTopologySpreadArgs

    def __init__(self, args: PodTopologySpreadArgs | None, handle: Handle) -> None:
        self.args = checked_args(args, PodTopologySpreadArgs)
        self.handle = handle
        self._defaults = self.args.constraints()
        self._system = self.args.defaulting_type == SYSTEM
        self._index: LabelIndex | None = None
        self._affinity: dict[Any, RequiredEval | None] = {}

    # -- constraints -----------------------------------------------------------------------

    def constraints(
        self, pod: PodInfo, hard: bool
    ) -> tuple[tuple[Constraint, ...], tuple[str, ...]]:
        """The pod's constraints of one kind (kube's getConstraints / initPreScoreState):
        its own if it has any, else the defaults when it belongs to a controller; and the
        problems found in its own."""
        if pod.topology_spread_constraints:
            own, errors = pod_constraints(pod.topology_spread_constraints, pod.labels)
            return tuple(c for c in own if c.hard == hard), errors
        kind, uid = pod.controller
        if kind not in CONTROLLER_KINDS or not uid:
            return (), ()
        return tuple(
            Constraint(
                d.max_skew,
                d.topology_key,
                EVERYTHING,
                d.when_unsatisfiable == DO_NOT_SCHEDULE,
                controller_uid=uid,
            )
            for d in self._defaults
            if (d.when_unsatisfiable == DO_NOT_SCHEDULE) == hard
        ), ()

    # -- shared: label index, domains, eligibility, counts ---------------------------------

    def _sync(self, keys: tuple[str, ...]) -> LabelIndex:
        snap = self.handle.snapshot
        snap.watch_labels(keys)
        index = self._index = synced_index(self._index, snap)
        return index

    def _affinity_eval(self, pod: PodInfo) -> RequiredEval | None:
        raw: Any = pod.affinity.get("nodeAffinity") if pod.affinity else None
        sig = (freeze(pod.node_selector), freeze(raw))
        if sig in self._affinity:
            return self._affinity[sig]
        if len(self._affinity) >= _AFFINITY_CACHE_LIMIT:
            self._affinity.clear()
        # Parse errors are NodeAffinity's to report; as upstream, they are ignored here.
        req = parse_required(
            pod.node_selector,
            raw if isinstance(raw, dict) else {},
            "spec.affinity.nodeAffinity",
            [],
        )
        ev = self._affinity[sig] = RequiredEval(req) if req is not None else None
        return ev

    def _arrays(
        self, state: CycleState, pod: PodInfo, cs: tuple[Constraint, ...], require_all: bool
    ) -> tuple[NDArray[np.int32], NDArray[np.bool_], Counts, int]:
        """Per constraint over every row: domain id, eligibility, matching pods; and the
        widest domain count."""
        affinity = self._affinity_eval(pod) if any(c.honor_affinity for c in cs) else None
        keys = tuple(dict.fromkeys(c.topology_key for c in cs))
        if affinity is not None:
            keys += _required_keys(affinity.req)
        index = self._sync(keys)
        snap = self.handle.snapshot
        n = len(snap.node_valid)
        dom = np.full((len(cs), n), -1, np.int32)
        width = 1
        for k, c in enumerate(cs):
            dom[k], values = index.rows(c.topology_key)
            width = max(width, len(values))
        base = snap.node_valid[:n].copy()
        if require_all:
            base &= (dom >= 0).all(axis=0)
        eligible = np.empty((len(cs), n), np.bool_)
        affinity_ok: NDArray[np.bool_] | None = None
        taints_ok: NDArray[np.bool_] | None = None
        for k, c in enumerate(cs):
            e = base.copy()
            if c.honor_affinity and affinity is not None:
                if affinity_ok is None:
                    affinity_ok = np.zeros(n, np.bool_)
                    rows = np.flatnonzero(snap.node_valid[:n])
                    affinity_ok[rows] = affinity.mask(index, rows)
                e &= affinity_ok
            if c.honor_taints:
                if taints_ok is None:
                    taints_ok = self._tolerated(snap, pod, n)
                e &= taints_ok
            eligible[k] = e
        return dom, eligible, self._counts(state, pod, cs, n), width

    @staticmethod
    def _tolerated(snap: NodeColumns, pod: PodInfo, n: int) -> NDArray[np.bool_]:
        """Rows whose NoSchedule/NoExecute taints the pod tolerates (nodeTaintsPolicy)."""
        tolerations = parse_tolerations(pod.tolerations)
        ok = np.array(
            [
                all(
                    tolerated(tolerations, t)
                    for t in snap.taints_of(ts)
                    if t.effect in (NO_SCHEDULE, NO_EXECUTE)
                )
                for ts in range(len(snap.taintsets))
            ],
            np.bool_,
        )
        ts = snap.node_taintset[:n]
        if not len(ok):
            return np.ones(n, np.bool_)
        return (ts < 0) | ok[np.where(ts >= 0, ts, 0)]

    def _counts(
        self, state: CycleState, pod: PodInfo, cs: tuple[Constraint, ...], n: int
    ) -> Counts:
        cache = state.get(_COUNTS)
        if cache is None:
            cache = {}
            state.write(_COUNTS, cache)
        out = np.zeros((len(cs), n), np.int64)
        for k, c in enumerate(cs):
            if not c.controller_uid and not c.selector.requirements:
                continue  # kube counts no pod for an empty or nil selector
            key = (c.controller_uid, c.selector)
            got = cache.get(key)
            if got is None or len(got) != n:
                got = self.handle.count_matching_pods(_Counted.of(c, pod.namespace))[:n]
                cache[key] = got
            out[k] = got
        return out

    # -- PreFilter / Filter ----------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        cs, errors = self.constraints(pod, hard=True)
        if errors:
            return None, unresolvable(*errors)
        if not cs:
            return None, skip()
        state.write(_FILTER, cs)
        return None, Status()

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        cs = state.get(_FILTER)
        if cs is None:  # PreFilter disabled in the profile
            cs, _ = self.constraints(pod, hard=True)
            if not cs:
                return FilterResult(candidates)
        dom, eligible, counts, width = self._arrays(state, pod, cs, require_all=True)
        n = dom.shape[1]
        code = np.empty(n, np.int8)
        passed = _spread_filter(
            candidates[:n],
            dom,
            eligible,
            counts,
            np.array([_self_match(c, pod) for c in cs], np.int64),
            np.array([c.max_skew for c in cs], np.int64),
            np.array([c.min_domains for c in cs], np.int64),
            np.zeros((len(cs), width), np.int64),
            np.zeros((len(cs), width), np.bool_),
            code,
        )
        if passed == int(np.count_nonzero(candidates)):
            return FilterResult(candidates)
        feasible = candidates.copy()
        feasible[:n] &= code == 0
        missing = code == SPREAD_MISSING_LABEL
        # Reasons index: 0 the missing label (UnschedulableAndUnresolvable), 1 the skew.
        codes = np.zeros(len(candidates), np.int8)
        codes[:n][code == SPREAD_SKEW] = 1
        unresolved = np.zeros(len(candidates), np.bool_)
        unresolved[:n] = missing
        return FilterResult(
            feasible, (REASON_MISSING_LABEL, REASON), codes, unresolvable=unresolved
        )

    # -- PreScore / Score / NormalizeScore -------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Status:
        if self.handle.snapshot.size == 0:
            return skip()
        cs, _ = self.constraints(pod, hard=False)
        if not cs:
            return skip()
        # Only the system defaults let nodes without every key still score (hostname
        # spreading on nodes without a zone), as upstream.
        require_all = bool(pod.topology_spread_constraints) or not self._system
        state.write(_SCORE, _ScoreState(cs, require_all))
        return Status()

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        st = state.get(_SCORE)
        if st is None:  # PreScore disabled in the profile
            cs, _ = self.constraints(pod, hard=False)
            st = _ScoreState(cs, bool(pod.topology_spread_constraints) or not self._system)
            state.write(_SCORE, st)
        if not st.constraints:
            st.ignored = np.zeros(len(rows), np.bool_)
            return np.zeros(len(rows), np.float64)
        cs = st.constraints
        dom, eligible, counts, width = self._arrays(state, pod, cs, st.require_all)
        ignored = np.zeros(len(rows), np.bool_)
        raw = np.zeros(len(rows), np.int64)
        _spread_score(
            rows.astype(np.intp, copy=False),
            dom,
            eligible,
            counts,
            np.array([c.max_skew for c in cs], np.int64),
            np.array([c.topology_key == HOSTNAME for c in cs], np.bool_),
            st.require_all,
            np.zeros((len(cs), width), np.int64),
            np.zeros((len(cs), width), np.bool_),
            ignored,
            raw,
        )
        st.ignored = ignored
        return raw.astype(np.float64)

    def normalize(self, state: CycleState, pod: PodInfo, scores: Scores) -> None:
        """kube's NormalizeScore: fewer matching pods is better, in integers; ignored nodes
        (missing a key) score 0; all 100 when the most crowded node has a raw 0."""
        st = state.get(_SCORE)
        ignored = st.ignored if st is not None and len(st.ignored) == len(scores) else None
        counted = scores if ignored is None else scores[~ignored]
        if not len(counted):
            scores[:] = 0.0
            return
        lo, hi = int(counted.min()), int(counted.max())
        if hi == 0:
            out = np.full(len(scores), MAX_NODE_SCORE)
        else:
            ints = scores.astype(np.int64)
            out = ((int(MAX_NODE_SCORE) * (hi + lo - ints)) // hi).astype(np.float64)
        if ignored is not None:
            out[ignored] = 0.0
        scores[:] = out

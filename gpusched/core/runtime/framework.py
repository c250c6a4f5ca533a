"""The framework runner: one profile's plugins, run point by point, timed per plugin.

Built once per profile; refuses an invalid profile at construction so a bad configuration
stops start-up instead of failing pods one by one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpusched.config.profile import ConfigError, Profile
from gpusched.config.profiles import default_args
from gpusched.core.runtime.tie_break import SeededNodeOrder
from gpusched.core.runtime.waiting import WaitingPod, WaitingPods
from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    BindPlugin,
    Diagnosis,
    FilterPlugin,
    Handle,
    Mask,
    Nominator,
    NormalizeScorePlugin,
    PermitPlugin,
    PodExpander,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    Rows,
    ScorePlugin,
    Scores,
    ScoreUnit,
    TelemetryPlugin,
    TenantFairSort,
    WarmStartPlugin,
)
from gpusched.framework.points import PROTOCOLS, Point
from gpusched.framework.registry import Registry
from gpusched.framework.status import INVALID_POD, SUCCESS, Code, Status
from gpusched.kernels import accumulate_scores_nb, accumulate_scores_np
from gpusched.kernels.dispatch import pick
from gpusched.model.pod import PodInfo

accumulate_scores = pick(accumulate_scores_nb, accumulate_scores_np)
_MIN_SCORE = float(MIN_NODE_SCORE)
_MAX_SCORE = float(MAX_NODE_SCORE)

_log = logging.getLogger(__name__)


def _raised(point: str, plugin: str, exc: Exception) -> Status:
    """Every extension point turns a plugin's exception into this Error status: a plugin bug
    costs the pod one attempt (requeued with backoff), never the scheduler."""
    return Status(Code.ERROR, (f"{plugin} {point} raised {exc!r}",), plugin, exc)


@dataclass(slots=True)
class PluginScores:
    raw: Scores
    normalized: Scores
    weight: float


@dataclass(slots=True)
class ScoreResult:
    rows: Rows
    total: Scores
    by_plugin: dict[str, PluginScores] = field(default_factory=dict)


class Timings:
    """Time per (point, plugin), for metrics and the decision record.

    Each (point, plugin) pair gets a slot in two flat lists when the framework is built, so
    the per-call bookkeeping on the hot path is two list updates, not dict lookups.
    """

    __slots__ = ("_calls", "_keys", "_ns", "_slots")

    def __init__(self) -> None:
        self._slots: dict[tuple[str, str], int] = {}
        self._keys: list[tuple[str, str]] = []
        self._ns: list[int] = []
        self._calls: list[int] = []

    def slot(self, point: str, plugin: str) -> int:
        key = (point, plugin)
        got = self._slots.get(key)
        if got is None:
            got = self._slots[key] = len(self._keys)
            self._keys.append(key)
            self._ns.append(0)
            self._calls.append(0)
        return got

    def add_slot(self, slot: int, ns: int) -> None:
        self._ns[slot] += ns
        self._calls[slot] += 1

    def add(self, point: str, plugin: str, ns: int) -> None:
        self.add_slot(self.slot(point, plugin), ns)

    def keys(self) -> list[tuple[str, str]]:
        """The (point, plugin) of each slot, in slot order (as `totals`)."""
        return list(self._keys)

    def totals(self) -> list[int]:
        """Nanoseconds so far per slot: read around one pod, the difference is its cost
        per plugin (bench/schedule_one.py)."""
        return list(self._ns)

    @property
    def ns(self) -> dict[tuple[str, str], int]:
        return {k: self._ns[i] for i, k in enumerate(self._keys) if self._calls[i]}

    @property
    def calls(self) -> dict[tuple[str, str], int]:
        return {k: self._calls[i] for i, k in enumerate(self._keys) if self._calls[i]}

    def per_call_us(self) -> dict[str, float]:
        return {
            f"{p}/{n}": self._ns[i] / self._calls[i] / 1e3
            for i, (p, n) in enumerate(self._keys)
            if self._calls[i]
        }


TieBreak = Callable[[Rows], int]


class Framework:
    def __init__(
        self,
        profile: Profile,
        registry: Registry,
        handle: Handle,
        *,
        tie_break: TieBreak | None = None,
        seed: int = 0,
        waiting: WaitingPods | None = None,
        previous: Framework | None = None,
        generation: int = 1,
    ) -> None:
        """`seed` orders nodes for the tie-break (core/runtime/tie_break.py); `tie_break`
        replaces the rule (the simulator's reproduction of the FGD paper's node order).
        `previous`: the framework this one replaces on a configuration reload
        (daemon/reload.py): each of its plugin instances whose args are unchanged is kept,
        with what it learnt (prices, caches, nominations), and so are its timings.
        `generation`: the configuration generation it was built from (decision records)."""
        self.profile = profile
        self.handle = handle
        self.scheduler_name = profile.scheduler_name
        self.generation = generation
        self.timings: Timings = previous.timings if previous is not None else Timings()
        # Plugin names whose instance came from `previous` (the rest are new).
        self.reused: frozenset[str] = frozenset()
        # Pods parked at Permit: the handle's map when it has one, so every profile and the
        # plugins (Handle.waiting_pods) see the same pods.
        self.waiting = waiting if waiting is not None else WaitingPods()
        self.tie_break: TieBreak = tie_break or SeededNodeOrder(handle, seed)
        self.plugins: dict[str, Any] = {}
        for name in profile.names():
            try:
                spec = registry.get(name)
            except KeyError as exc:
                raise ConfigError(
                    f"profiles[{profile.scheduler_name}].plugins", str(exc.args[0])
                ) from None
            args = profile.plugin_args.get(name)
            if args is None:  # a profile built in code, not loaded: defaults as the loader's
                args = default_args(
                    spec, f"profiles[{profile.scheduler_name}].pluginConfig[{name}].args"
                )
            kept = previous.plugins.get(name) if previous is not None else None
            if (
                previous is not None
                and type(kept) is spec.cls
                and previous.profile.plugin_args.get(name) == profile.plugin_args.get(name)
            ):
                self.plugins[name] = kept
                continue
            self.plugins[name] = spec.cls(args, handle)
        if previous is not None:
            self.reused = frozenset(
                n for n, p in self.plugins.items() if previous.plugins.get(n) is p
            )

        def at(point: Point) -> list[Any]:
            out = []
            for ref in profile.enabled(point):
                plugin = self.plugins[ref.name]
                if not isinstance(plugin, PROTOCOLS[point]):
                    raise ConfigError(
                        f"profiles[{profile.scheduler_name}].plugins.{point.value}",
                        f"plugin {ref.name} does not implement {point.value}",
                    )
                out.append(plugin)
            return out

        qs = at(Point.QUEUE_SORT)
        if len(qs) != 1:
            raise ConfigError(
                f"profiles[{profile.scheduler_name}].plugins.queueSort",
                f"exactly one QueueSort plugin must be enabled, got {len(qs)}",
            )
        self.queue_sort: QueueSortPlugin = qs[0]
        # The queue's tenant fairness, when the QueueSort plugin offers it (core/queue/active).
        self.fair: TenantFairSort | None = qs[0] if isinstance(qs[0], TenantFairSort) else None
        self.pre_enqueue: list[PreEnqueuePlugin] = at(Point.PRE_ENQUEUE)
        self.pre_filter: list[PreFilterPlugin] = at(Point.PRE_FILTER)
        # PreFilter plugins that re-shape the pod for the cycle (PodExpander).
        self.expanders: list[PodExpander] = [
            p for p in self.pre_filter if isinstance(p, PodExpander)
        ]
        self.filter: list[FilterPlugin] = at(Point.FILTER)
        self.post_filter: list[PostFilterPlugin] = at(Point.POST_FILTER)
        self.nominators: list[Nominator] = [p for p in self.post_filter if isinstance(p, Nominator)]
        self.pre_score: list[PreScorePlugin] = at(Point.PRE_SCORE)
        self.score: list[tuple[ScorePlugin, float]] = []
        for ref in profile.enabled(Point.SCORE):
            if ref.weight is None or not ref.weight > 0:
                raise ConfigError(
                    f"profiles[{profile.scheduler_name}].plugins.score.enabled[{ref.name}].weight",
                    f"every Score plugin needs a positive weight, got {ref.weight!r}",
                )
        self.score = list(
            zip(
                at(Point.SCORE),
                [float(r.weight or 0) for r in profile.enabled(Point.SCORE)],
                strict=True,
            )
        )
        # isinstance against a runtime-checkable Protocol costs ~20 us; decide once.
        self._normalizes = [isinstance(p, NormalizeScorePlugin) for p, _ in self.score]
        self._filter_slots = [self.timings.slot("Filter", p.name) for p in self.filter]
        self._score_slots = [self.timings.slot("Score", p.name) for p, _ in self.score]
        self.reserve: list[ReservePlugin] = at(Point.RESERVE)
        self.permit: list[PermitPlugin] = at(Point.PERMIT)
        # (plugin, timing slot) per point: the per-call bookkeeping is a list update.
        self._pre_filter = [(p, self.timings.slot("PreFilter", p.name)) for p in self.pre_filter]
        self._pre_score = [(p, self.timings.slot("PreScore", p.name)) for p in self.pre_score]
        self._reserve = [(p, self.timings.slot("Reserve", p.name)) for p in self.reserve]
        self._permit = [(p, self.timings.slot("Permit", p.name)) for p in self.permit]
        self.pre_bind: list[PreBindPlugin] = at(Point.PRE_BIND)
        self.bind: list[BindPlugin] = at(Point.BIND)
        if not self.bind:
            raise ConfigError(
                f"profiles[{profile.scheduler_name}].plugins.bind",
                "at least one Bind plugin must be enabled",
            )
        self.post_bind: list[PostBindPlugin] = at(Point.POST_BIND)
        self.max_total_score = sum(w for _, w in self.score) * MAX_NODE_SCORE
        # Each Score plugin's unit and meaning (ScoreUnit), built once. The decision record
        # carries the units of the plugins that scored; the meanings (a paragraph each) go
        # into the daemon's `started` line once, not into every record.
        self.score_units: dict[str, dict[str, str]] = {
            p.name: _unit_entry(p) for p, _ in self.score
        }
        self._units_of: dict[tuple[str, ...], dict[str, str]] = {}

    # -- helpers ---------------------------------------------------------------------------

    def less(self, a: PodInfo, b: PodInfo) -> bool:
        return self.queue_sort.less(a, b)

    def run_pre_enqueue(self, pod: PodInfo) -> Status:
        """Whether the pod may enter activeQ: the first non-success of the PreEnqueue plugins
        (kube-scheduler's RunPreEnqueuePlugins), named after its plugin. A raise keeps the pod
        out too, as an Error (it is retried on its next update)."""
        for p in self.pre_enqueue:
            try:
                st = p.pre_enqueue(pod)
            except Exception as exc:
                return _raised("PreEnqueue", p.name, exc)
            if not st.is_success():
                return st.with_plugin(p.name)
        return SUCCESS

    # -- scheduling cycle ------------------------------------------------------------------

    def expand(self, pod: PodInfo) -> PodInfo:
        """The pod as this cycle sees it (PodExpander); a plugin that raises leaves it as
        it was (its PreFilter then sees the same pod and says what is wrong)."""
        for p in self.expanders:
            try:
                pod = p.expand(pod)
            except Exception:
                _log.exception("%s.expand raised for pod %s", p.name, pod.key)
        return pod

    def run_pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[Rows | None, Status]:
        if pod.errors:
            # A malformed pod can never fit: say exactly what is wrong and keep it pending.
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, pod.errors, INVALID_POD)
        rows: Rows | None = None
        clock = time.perf_counter_ns
        add = self.timings.add_slot
        for p, slot in self._pre_filter:
            t0 = clock()
            try:
                res, st = p.pre_filter(state, pod)
            except Exception as exc:  # a plugin bug must not take the scheduler down
                return None, _raised("PreFilter", p.name, exc)
            add(slot, clock() - t0)
            if st.is_skip():
                state.skip_filter.add(p.name)
                continue
            if not st.is_success():
                return None, st.with_plugin(p.name)
            if res is not None and res.rows is not None:
                rows = res.rows if rows is None else np.intersect1d(rows, res.rows)
        return rows, Status()

    def candidates(self, rows: Rows | None) -> Mask:
        snap = self.handle.snapshot
        mask = snap.node_valid.copy()
        if rows is not None:
            narrowed = np.zeros_like(mask)
            narrowed[rows] = True
            mask &= narrowed
        return mask

    def run_filter(
        self, state: CycleState, pod: PodInfo, mask: Mask
    ) -> tuple[Mask, Diagnosis, Status]:
        """Run every Filter over the candidate mask; a row's reason is the first filter
        that rejects it, as kube-scheduler stops at the first failing filter per node.
        The Status is an Error only if a plugin raised."""
        diag = Diagnosis(total_nodes=self.handle.snapshot.size)
        clock = time.perf_counter_ns
        skip = state.skip_filter
        for p, slot in zip(self.filter, self._filter_slots, strict=True):
            if skip and p.name in skip:
                continue
            t0 = clock()
            try:
                res = p.filter(state, pod, mask)
            except Exception as exc:
                return mask, diag, _raised("Filter", p.name, exc)
            self.timings.add_slot(slot, clock() - t0)
            if res.feasible is mask:
                continue  # the plugin let every candidate through
            diag.record(mask, res, p.name)
            mask = mask & res.feasible
        return mask, diag, SUCCESS

    def run_post_filter(
        self, state: CycleState, pod: PodInfo, diag: Diagnosis
    ) -> tuple[str | None, Status]:
        last = Status(Code.UNSCHEDULABLE, (diag.message(),))
        for p in self.post_filter:
            t0 = time.perf_counter_ns()
            try:
                node, st = p.post_filter(state, pod, diag)
            except Exception as exc:
                return None, _raised("PostFilter", p.name, exc)
            self.timings.add("PostFilter", p.name, time.perf_counter_ns() - t0)
            if st.is_success():
                return node, st.with_plugin(p.name)
            if st.code is Code.ERROR:
                return None, st.with_plugin(p.name)
            last = st.with_plugin(p.name)
        return None, last

    def run_pre_score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Status:
        clock = time.perf_counter_ns
        for p, slot in self._pre_score:
            t0 = clock()
            try:
                st = p.pre_score(state, pod, rows)
            except Exception as exc:
                return _raised("PreScore", p.name, exc)
            self.timings.add_slot(slot, clock() - t0)
            if st.is_skip():
                state.skip_score.add(p.name)
            elif not st.is_success():
                return st.with_plugin(p.name)
        return Status()

    def run_score(
        self, state: CycleState, pod: PodInfo, rows: Rows, *, keep: bool = False
    ) -> tuple[ScoreResult | None, Status]:
        total = np.zeros(len(rows), np.float64)
        result = ScoreResult(rows, total)
        clock = time.perf_counter_ns
        skip = state.skip_score
        for (p, weight), normalizes, slot in zip(
            self.score, self._normalizes, self._score_slots, strict=True
        ):
            if skip and p.name in skip:
                continue
            t0 = clock()
            try:
                raw = p.score(state, pod, rows)
                norm = raw
                if normalizes:
                    norm = raw.copy()
                    p.normalize(state, pod, norm)  # type: ignore[attr-defined]
            except Exception as exc:
                return None, _raised("Score", p.name, exc)
            self.timings.add_slot(slot, clock() - t0)
            if len(norm) != len(rows):
                return None, Status(
                    Code.ERROR,
                    (f"{p.name} returned {len(norm)} scores for {len(rows)} nodes",),
                    p.name,
                )
            if norm.dtype != np.float64 or not norm.flags.c_contiguous:
                norm = np.ascontiguousarray(norm, np.float64)  # the kernel's one signature
            # total += weight * norm, and whether every score is in range (NaN is not: it
            # passes `<`/`>` checks and then no row is best). On a failure the total is
            # dropped with the attempt.
            if not accumulate_scores(total, norm, weight, _MIN_SCORE, _MAX_SCORE):
                return None, Status(
                    Code.ERROR,
                    (
                        f"{p.name} scored outside [0, 100]:"
                        f" min {norm.min():.3g}, max {norm.max():.3g}",
                    ),
                    p.name,
                )
            if keep:
                result.by_plugin[p.name] = PluginScores(raw, norm, weight)
        return result, Status()

    def select(self, scores: ScoreResult, nominated: int = -1) -> int:
        """The nominated row when it is feasible (kube-scheduler's evaluateNominatedNode:
        the preemptor takes the room it freed); else the row with the highest total score,
        ties broken by the tie-break policy."""
        return self.select_tied(scores, nominated)[0]

    def select_tied(self, scores: ScoreResult, nominated: int = -1) -> tuple[int, int]:
        """`select`, and how many nodes shared the top total (the tie-break chose among
        them; 1: no tie); 0 when the nominated row was taken without comparing scores."""
        if nominated >= 0 and bool(np.any(scores.rows == nominated)):
            return nominated, 0
        best = scores.total.max()
        # Float weights make equal integer scores differ in the last bits; compare with a
        # tolerance far below one score point.
        ties = scores.rows[scores.total >= best - 1e-9 * max(1.0, abs(best))]
        return self.tie_break(ties), len(ties)

    def score_units_of(self, names: Collection[str]) -> dict[str, str]:
        """{plugin: unit} for these plugins (those that scored a pod), built once per set
        of names: the record asks on every attempt. Shared: read it, never change it."""
        key = tuple(names)
        got = self._units_of.get(key)
        if got is None:
            got = self._units_of[key] = {
                n: self.score_units[n]["unit"] for n in key if n in self.score_units
            }
        return got

    def describe_tie_break(self, node: str) -> dict[str, object]:
        """The tie-break rule and its input for the decision record (SeededNodeOrder's own
        words; another rule, e.g. the simulator's comparison orders, by its name)."""
        describe = getattr(self.tie_break, "describe", None)
        if describe is not None:
            out: dict[str, object] = describe(node)
            return out
        tb = self.tie_break
        return {"rule": getattr(tb, "__qualname__", type(tb).__name__)}

    def nominated_row(self, pod: PodInfo) -> int:
        """The snapshot row of the node a Nominator plugin nominated the pod to; -1: none."""
        for p in self.nominators:
            node = p.nominated_node(pod)
            if node:
                return self.handle.snapshot.row_of(node)
        return -1

    # -- reserve / permit ------------------------------------------------------------------

    def run_reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        clock = time.perf_counter_ns
        for i, (p, slot) in enumerate(self._reserve):
            t0 = clock()
            try:
                st = p.reserve(state, pod, node)
            except Exception as exc:  # a plugin bug costs the attempt, not the placement state
                st = _raised("Reserve", p.name, exc)
            self.timings.add_slot(slot, clock() - t0)
            if not st.is_success():
                self._unreserve(self.reserve[: i + 1], state, pod, node)
                return st.with_plugin(p.name)
        return Status()

    def run_unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        self._unreserve(self.reserve, state, pod, node)

    @staticmethod
    def _unreserve(
        plugins: Sequence[ReservePlugin], state: CycleState, pod: PodInfo, node: str
    ) -> None:
        # Reverse order, as kube-scheduler does, so later reservations are undone first.
        # Every plugin gets its Unreserve even if an earlier one raises.
        for p in reversed(plugins):
            try:
                p.unreserve(state, pod, node)
            except Exception:
                _log.exception("Unreserve of %s raised for pod %s", p.name, pod.key)

    def run_permit(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        timeouts: dict[str, float] = {}
        clock = time.perf_counter_ns
        for p, slot in self._permit:
            t0 = clock()
            try:
                st, timeout = p.permit(state, pod, node)
            except Exception as exc:
                return _raised("Permit", p.name, exc)
            self.timings.add_slot(slot, clock() - t0)
            if st.is_wait():
                timeouts[p.name] = timeout
            elif not st.is_success():
                return st.with_plugin(p.name)
        if timeouts:
            self.waiting.add(WaitingPod(pod, node, timeouts, self.handle.now()))
            return Status(Code.WAIT, (), next(iter(timeouts)))
        return Status()

    async def wait_on_permit(self, pod: PodInfo) -> Status:
        wp = self.waiting.get(pod.uid)
        if wp is None:
            return Status()
        try:
            return await wp.wait(self.handle.now())
        finally:
            self.waiting.remove(pod.uid)

    # -- binding cycle ---------------------------------------------------------------------

    async def run_pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        for p in self.pre_bind:
            t0 = time.perf_counter_ns()
            try:
                st = await p.pre_bind(state, pod, node)
            except Exception as exc:
                return _raised("PreBind", p.name, exc)
            self.timings.add("PreBind", p.name, time.perf_counter_ns() - t0)
            if not st.is_success():
                return st.with_plugin(p.name)
        return Status()

    async def run_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        for p in self.bind:
            t0 = time.perf_counter_ns()
            try:
                st = await p.bind(state, pod, node)
            except Exception as exc:
                return _raised("Bind", p.name, exc)
            self.timings.add("Bind", p.name, time.perf_counter_ns() - t0)
            if st.is_skip():
                continue
            return st.with_plugin(p.name)
        return Status(Code.ERROR, ("no Bind plugin bound the pod",))

    async def run_post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None:
        # The pod is bound: a failing PostBind (informational) must not undo the placement.
        for p in self.post_bind:
            try:
                await p.post_bind(state, pod, node)
            except Exception:
                _log.exception("PostBind of %s raised for pod %s", p.name, pod.key)

    def warm_start(self, pods: Sequence[PodInfo], only: Collection[str] | None = None) -> None:
        """Hand the profile's already bound pods to every plugin that learns from them
        (`only`: to these plugins, e.g. the new instances of a reload)."""
        for name, plugin in self.plugins.items():
            if only is not None and name not in only:
                continue
            if isinstance(plugin, WarmStartPlugin):
                try:
                    plugin.warm_start(pods)
                except Exception:  # a learner that cannot learn must not stop the leader
                    _log.exception("warm start of %s raised", name)

    def telemetry_updated(self) -> None:
        """Tell every plugin that keeps state over live telemetry that the readings
        changed (call after each ingestion pass, before the next attempt)."""
        for name, plugin in self.plugins.items():
            if isinstance(plugin, TelemetryPlugin):
                try:
                    plugin.telemetry_updated()
                except Exception:  # telemetry must never stop the scheduler
                    _log.exception("telemetry update of %s raised", name)


def _unit_entry(plugin: object) -> dict[str, str]:
    unit = getattr(plugin, "score_unit", None)
    if not isinstance(unit, ScoreUnit):  # a plugin from outside that declares none
        return {"unit": "points (0-100)", "meaning": "not declared by the plugin"}
    return {"unit": unit.unit, "meaning": unit.meaning}


def pre_enqueue_of(frameworks: Mapping[str, Framework]) -> Callable[[PodInfo], Status] | None:
    """The queue's PreEnqueue check: each pod's profile's plugins (a pod of no profile
    passes). None when no profile has any, so the queue pays nothing for it."""
    if not any(fw.pre_enqueue for fw in frameworks.values()):
        return None
    by_name = dict(frameworks)

    def run(pod: PodInfo) -> Status:
        fw = by_name.get(pod.scheduler_name)
        return SUCCESS if fw is None else fw.run_pre_enqueue(pod)

    return run

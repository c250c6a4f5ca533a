"""Why a pod is pending, and the smallest change that would let it fit.

explain(pod)
  dry cycle on a copy of the scheduler's state (attempt.py): where it stops, per-node
  reasons grouped as kube-scheduler counts them
  binding constraint: the stage's plugin (PreEnqueue, PreFilter), else the blockers of
  the nodes closest to fitting (fewest Filters against them)
  counterfactuals for that constraint (counterfactuals.py): each a change to the input
  (pods gone, a plugin argument, the pod's spec, a quota, a gang member) under which
  the same plugins, run again on a fresh copy, let the pod through
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpusched.explain import attempt as dry
from gpusched.explain import counterfactuals as cf
from gpusched.explain.attempt import Attempt
from gpusched.explain.counterfactuals import Change
from gpusched.explain.kinds import FRAGMENTATION, RESOURCES, kind_of
from gpusched.explain.world import Facts, World
from gpusched.framework.registry import Registry
from gpusched.model.pod import PodInfo
from gpusched.plugins.helper.gpu_state import compute_summary, gpu_request

# How many nodes closest to fitting the report lists (and the victim search tries).
CLOSEST_NODES = 5
GPU_FIT = "GPUFit"


@dataclass(slots=True)
class Explanation:
    pod: str
    scheduler: str
    # "pending": no node passes; "fits": a node passes now (the next attempt places it).
    state: str
    stage: str  # where the dry cycle stopped: PreEnqueue, PreFilter, Filter, fits
    message: str  # kube-scheduler's FailedScheduling wording
    binding: str  # the binding constraint's kind ("" when it fits)
    detail: str  # one sentence on the binding constraint
    groups: list[dict[str, Any]] = field(default_factory=list)
    closest: list[dict[str, Any]] = field(default_factory=list)
    feasible: list[str] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    trials: int = 0  # dry cycles run to find and verify the changes
    # False when the search was cut short (its dry cycles, its time, or cancelled): the
    # changes are those verified by then, and a smaller one may exist.
    complete: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "scheduler": self.scheduler,
            "state": self.state,
            "stage": self.stage,
            "message": self.message,
            "binding": self.binding,
            "detail": self.detail,
            "groups": self.groups,
            "closest": self.closest,
            "feasible": self.feasible,
            "changes": [{"kind": c.kind, "text": c.text, "action": c.action} for c in self.changes],
            "notes": self.notes,
            "trials": self.trials,
            "complete": self.complete,
        }


class Explainer:
    """Explains pods against one set of Facts (one instant of the scheduler's state).

    The search for changes stops early when `max_trials` dry cycles ran, when `clock()`
    reaches `deadline`, or when `stop()` says so (the request was cancelled, the daemon is
    exiting); it then reports what it verified so far (`Explanation.complete` False)."""

    def __init__(
        self,
        facts: Facts,
        registry: Registry,
        *,
        max_trials: int = 200,
        deadline: float | None = None,
        stop: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.facts = facts
        self.registry = registry
        self.max_trials = max_trials
        self.deadline = deadline
        self.stop = stop
        self.clock = clock
        self.trials = 0
        self.cut = ""  # why the search stopped early ("" while it has not)
        self.world = World(facts, registry)

    # -- dry cycles ---------------------------------------------------------------------------

    def spent(self) -> bool:
        """The search must stop (the trial budget is used up, its time is over, or it was
        cancelled): it reports what it verified so far. Checked between dry cycles."""
        if not self.cut:
            if self.trials >= self.max_trials:
                self.cut = f"the search stopped after {self.max_trials} dry cycles"
            elif self.deadline is not None and self.clock() >= self.deadline:
                self.cut = (
                    f"the search was cut short at its time limit after {self.trials} dry"
                    " cycles: the changes listed are those verified by then (a smaller one"
                    " may exist)"
                )
            elif self.stop is not None and self.stop():
                self.cut = "the search was cancelled"
        return bool(self.cut)

    def attempt(self, facts: Facts, pod: PodInfo, *, blockers: bool = False) -> Attempt | None:
        """A dry cycle on a fresh copy built from `facts`; None when the search must stop
        (spent: it then reports what it verified so far)."""
        if self.spent():
            return None
        self.trials += 1
        return dry.run(World(facts, self.registry), pod, blockers=blockers)

    def fits(self, facts: Facts, pod: PodInfo, node: str = "") -> Attempt | None:
        """The attempt if the pod fits under `facts` (on `node` when given), else None."""
        a = self.attempt(facts, pod)
        if a is None or not a.fits or (node and node not in a.feasible):
            return None
        return a

    # -- the explanation -----------------------------------------------------------------------

    def explain(self, pod: PodInfo) -> Explanation:
        self.trials = 0
        self.cut = ""
        now = dry.run(self.world, pod)
        groups = [
            {"plugin": plugin, "reason": reason, "kind": kind_of(plugin, reason), "nodes": n}
            for (plugin, reason), n in sorted(now.groups.items(), key=lambda kv: -kv[1])
        ]
        out = Explanation(
            pod=pod.key,
            scheduler=pod.scheduler_name,
            state="fits" if now.fits else "pending",
            stage=now.stage,
            message="" if now.fits else now.message(),
            binding="",
            detail="",
            groups=groups,
            feasible=now.feasible[:CLOSEST_NODES],
        )
        if now.pre_filtered:
            out.notes.append(f"{now.pre_filtered} node(s) ruled out at PreFilter")
        if now.fits:
            out.detail = (
                f"the pod fits now on {len(now.feasible)} node(s)"
                f" ({', '.join(now.feasible[:CLOSEST_NODES])}): the scheduler places it at"
                " its next attempt (it may be waiting out a backoff, or a change since its"
                " last attempt let it through)"
            )
            return out
        if now.stage in (dry.PRE_ENQUEUE, dry.PRE_FILTER) or not now.status.is_success():
            # Stopped by one plugin's status (a Filter that raised included): that plugin.
            out.binding = kind_of(now.status.plugin, now.status.message())
            out.detail = f"{now.stage} {now.status.plugin or 'check'}: {now.status.message()}"
            closest: list[str] = []
        else:
            out.binding, closest, out.detail = self._binding(now)
            out.closest = [
                {
                    "node": name,
                    "blockers": [
                        {"plugin": p, "reason": r, "kind": kind_of(p, r)}
                        for p, r in now.blockers.get(name, ())
                    ],
                }
                for name in closest[:CLOSEST_NODES]
            ]
        out.changes = cf.search(self, now, out.binding, closest)
        out.trials = self.trials
        if self.cut:  # set by spent() when the search skipped something
            out.complete = False
            out.notes.append(self.cut)
        if not out.changes:
            out.notes.append("no single change found that lets the pod fit")
        return out

    def _binding(self, now: Attempt) -> tuple[str, list[str], str]:
        """The kind of constraint that holds the pod on the nodes closest to fitting, those
        nodes (closest first), and a sentence on it."""
        if not now.blockers:
            return "unknown", [], "no node passed PreFilter"
        # The nodes the pod asked for (its node selector and required node affinity, the
        # taints it tolerates) first: on a cluster of many pools, the nodes outside the
        # pod's own pool each "fit but for affinity", and outnumber the pool's nodes that
        # fit but for room. Node selection binds only when no node passes it.
        asked = {
            n: b for n, b in now.blockers.items() if not any(p in NODE_SELECTION for p, _ in b)
        }
        blockers = asked or now.blockers
        fewest = min(len(b) for b in blockers.values())
        close = {n: b for n, b in blockers.items() if len(b) == fewest}
        sets = Counter(tuple(sorted({kind_of(p, r) for p, r in b})) for b in close.values())
        kinds, count = sets.most_common(1)[0]
        nodes = [
            n for n, b in close.items() if tuple(sorted({kind_of(p, r) for p, r in b})) == kinds
        ]
        kind = "+".join(kinds)
        reasons = sorted({r for n in nodes for _, r in close[n]})
        detail = f"{count} node(s) would take the pod but for {kind}: {'; '.join(reasons)}"
        if kind == RESOURCES:
            frag = fragmentation(self.world, now.pod, nodes, now.blockers)
            if frag:
                return FRAGMENTATION, nodes, frag
        return kind, nodes, detail


# The Filters that select nodes by the pod's own choice (kube-scheduler's node selection).
NODE_SELECTION = frozenset({"NodeAffinity", "TaintToleration", "NodeName"})


def fragmentation(
    world: World,
    pod: PodInfo,
    nodes: list[str],
    blockers: Mapping[str, Sequence[tuple[str, str]]],
) -> str:
    """A sentence when the whole cards the pod asks for are free in total on the nodes held
    only by GPUFit for want of free cards, but no one node has them together; "" otherwise.
    A card counts only if the pod could take it, by GPUFit's own rule (its summary kernel:
    an intact, healthy card of an allowed model with the memory asked for)."""
    need = pod.request.gpu_cards
    if need <= 1:
        return ""
    snap = world.cache.snapshot
    request = gpu_request(snap, pod)
    if request is None:
        return ""
    rows: dict[str, int] = {}
    for name in nodes:
        row = snap.row_of(name)
        if row >= 0 and all(p == GPU_FIT for p, _ in blockers.get(name, ())):
            rows[name] = row
    if not rows:
        return ""
    mask = np.zeros(len(snap.node_valid), np.bool_)
    mask[list(rows.values())] = True
    summary = compute_summary(snap, request, mask)
    free = {name: int(summary.intact[row]) for name, row in rows.items()}
    total = sum(free.values())
    if total < need or max(free.values(), default=0) >= need:
        return ""
    spread = ", ".join(f"{k}: {v}" for k, v in sorted(free.items(), key=lambda kv: -kv[1]) if v)
    return (
        f"fragmentation: {total} whole cards the pod could use are free in total ({spread})"
        f" but no node has {need} free together"
    )

"""One dry scheduling cycle on a World: PreEnqueue, PreFilter and Filter of the pod's
profile, exactly as core/schedule_one.py runs them, with every node's verdict kept.

Two views of the Filter verdicts:
- `groups`: kube-scheduler's view, each node counted under the first Filter that rejects
  it (the "0/N nodes are available: ..." message, grouped);
- `blockers`: per node, every Filter that rejects it, each plugin run on its own over the
  nodes PreFilter left: what would still stand in the way if one rule were relaxed. The
  binding constraint is read from the nodes with the fewest blockers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpusched.explain.world import World
from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import FilterResult, Mask
from gpusched.framework.status import Status
from gpusched.model.pod import PodInfo

PRE_ENQUEUE = "PreEnqueue"
PRE_FILTER = "PreFilter"
FILTER = "Filter"
FITS = "fits"


@dataclass(slots=True)
class Attempt:
    """Where a dry cycle stopped and why. `stage`: PRE_ENQUEUE or PRE_FILTER (`status`
    says why), FILTER (no node passed; or, with an Error `status`, a Filter plugin raised),
    or FITS (`feasible` names the nodes)."""

    pod: PodInfo
    stage: str
    status: Status = field(default_factory=Status)
    total_nodes: int = 0
    # (plugin, reason) -> nodes counted under it (the first Filter that rejected them).
    groups: dict[tuple[str, str], int] = field(default_factory=dict)
    # Nodes PreFilter ruled out before any Filter (its narrowing: NodeAffinity, a gang).
    pre_filtered: int = 0
    feasible: list[str] = field(default_factory=list)
    # node -> ((plugin, reason), ...) every Filter that rejects it, in Filter order.
    blockers: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.stage == FITS

    def message(self) -> str:
        """kube-scheduler's FailedScheduling message for this attempt."""
        if self.stage in (PRE_ENQUEUE, PRE_FILTER) or not self.status.is_success():
            return self.status.message()
        body = ", ".join(sorted(f"{n} {r}" for (_, r), n in self.groups.items()))
        return f"0/{self.total_nodes} nodes are available: {body}."


def row_reasons(res: FilterResult, row: int) -> list[str]:
    """Why a Filter rejected one row, as Diagnosis counts it."""
    if not res.reasons:
        return [""]
    if res.hits is not None:
        return [r for r, hit in zip(res.reasons, res.hits[:, row], strict=False) if hit]
    if res.codes is not None:
        return [res.reasons[int(res.codes[row])]]
    return [res.reasons[0]]


def run(world: World, pod: PodInfo, *, blockers: bool = True) -> Attempt:
    """The dry cycle for `pod` (which must be of one of the world's profiles)."""
    fw = world.frameworks[pod.scheduler_name]
    snap = world.cache.snapshot
    st = fw.run_pre_enqueue(pod)
    if not st.is_success():
        return Attempt(pod, PRE_ENQUEUE, st, snap.size)
    state = CycleState()
    world.dra_ledger.sync()
    pod = fw.expand(pod)
    rows, st = fw.run_pre_filter(state, pod)
    if not st.is_success():
        return Attempt(pod, PRE_FILTER, st, snap.size)
    candidates = fw.candidates(rows)
    feasible, diag, st = fw.run_filter(state, pod, candidates)
    if not st.is_success():  # a Filter raised: say so (and which) rather than explain around it
        return Attempt(pod, FILTER, st, snap.size)
    out = Attempt(pod, FILTER, Status(), snap.size)
    out.pre_filtered = int(np.count_nonzero(snap.node_valid)) - int(np.count_nonzero(candidates))
    for before, res, plugin in diag.steps:
        rejected = before & ~res.feasible
        for row in np.flatnonzero(rejected).tolist():
            for reason in row_reasons(res, row):
                key = (plugin, reason)
                out.groups[key] = out.groups.get(key, 0) + 1
    out.feasible = [snap.names[r] for r in np.flatnonzero(feasible).tolist()]
    if out.feasible:
        out.stage = FITS
    elif blockers:
        out.blockers = _blockers(world, pod, state, candidates)
    return out


def _blockers(
    world: World, pod: PodInfo, state: CycleState, candidates: Mask
) -> dict[str, tuple[tuple[str, str], ...]]:
    """Every Filter run on its own over the candidates (see the module docstring)."""
    fw = world.frameworks[pod.scheduler_name]
    snap = world.cache.snapshot
    found: dict[int, list[tuple[str, str]]] = {}
    for p in fw.filter:
        if p.name in state.skip_filter:
            continue
        try:
            res = p.filter(state, pod, candidates)
        except Exception as exc:  # as the runtime: a raising plugin blocks, named
            for row in np.flatnonzero(candidates).tolist():
                found.setdefault(row, []).append((p.name, f"{p.name} raised {exc!r}"))
            continue
        if res.feasible is candidates:
            continue
        for row in np.flatnonzero(candidates & ~res.feasible).tolist():
            found.setdefault(row, []).append((p.name, row_reasons(res, row)[0]))
    return {snap.names[row]: tuple(v) for row, v in found.items()}

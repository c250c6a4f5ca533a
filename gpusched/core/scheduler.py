"""The scheduling cycle and the binding cycle, shared by the daemon and the simulator.

The scheduling cycle (`schedule`) is synchronous: from reading the snapshot to assuming the
pod nothing awaits, so no other event can change the columns under it. The binding cycle
(`bind`) is a coroutine the daemon runs as a task per pod; the simulator drives it to
completion directly because its cluster port never suspends.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from gpusched.core.cache.cache import ClusterCache
from gpusched.core.runtime.framework import Framework, ScoreResult
from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import ALLOCATION, Allocation, Diagnosis
from gpusched.framework.status import Code, Status
from gpusched.model.pod import PodInfo

T = TypeVar("T")


class Result(enum.Enum):
    SCHEDULED = "scheduled"  # assumed; the binding cycle is next
    WAITING = "waiting"  # assumed and parked at Permit
    UNSCHEDULABLE = "unschedulable"
    ERROR = "error"


@dataclass(slots=True)
class Decision:
    pod: PodInfo
    result: Result
    status: Status
    state: CycleState
    node: str = ""
    alloc: Allocation | None = None
    diagnosis: Diagnosis | None = None
    scores: ScoreResult | None = None
    feasible: int = 0
    nominated: str | None = None
    point_ns: dict[str, int] = field(default_factory=dict)

    @property
    def message(self) -> str:
        if self.diagnosis is not None and self.result is Result.UNSCHEDULABLE:
            return self.diagnosis.message()
        return self.status.message()


class SchedulingCycle:
    def __init__(self, fw: Framework, cache: ClusterCache, *, assume_ttl: float = 30.0) -> None:
        self.fw = fw
        self.cache = cache
        self.assume_ttl = assume_ttl

    def schedule(self, pod: PodInfo, *, keep_scores: bool = False) -> Decision:
        fw = self.fw
        state = CycleState()
        clock = time.perf_counter_ns
        ns: dict[str, int] = {}
        t0 = clock()
        rows, st = fw.run_pre_filter(state, pod)
        t1 = clock()
        ns["PreFilter"] = t1 - t0
        if not st.is_success():
            diag = Diagnosis(total_nodes=fw.handle.snapshot.size, pre_filter_status=st)
            result = Result.ERROR if st.code is Code.ERROR else Result.UNSCHEDULABLE
            return Decision(pod, result, st, state, diagnosis=diag, point_ns=ns)
        feasible, diag = fw.run_filter(state, pod, fw.candidates(rows))
        frows = np.flatnonzero(feasible)
        t2 = clock()
        ns["Filter"] = t2 - t1
        if len(frows) == 0:
            nominated, pst = fw.run_post_filter(state, pod, diag)
            ns["PostFilter"] = clock() - t2
            status = Status(Code.UNSCHEDULABLE, (diag.message(),), pst.plugin)
            return Decision(
                pod,
                Result.UNSCHEDULABLE,
                status,
                state,
                diagnosis=diag,
                nominated=nominated,
                point_ns=ns,
            )
        st = fw.run_pre_score(state, pod, frows)
        if not st.is_success():
            return Decision(
                pod, Result.ERROR, st, state, diagnosis=diag, feasible=len(frows), point_ns=ns
            )
        scores, st = fw.run_score(state, pod, frows, keep=keep_scores)
        t3 = clock()
        ns["Score"] = t3 - t2
        if scores is None:
            return Decision(
                pod, Result.ERROR, st, state, diagnosis=diag, feasible=len(frows), point_ns=ns
            )
        row = fw.select(scores)
        node = fw.handle.snapshot.names[row]
        st = fw.run_reserve(state, pod, node)
        if not st.is_success():
            return Decision(
                pod,
                Result.UNSCHEDULABLE if st.is_rejected() else Result.ERROR,
                st,
                state,
                node=node,
                diagnosis=diag,
                scores=scores,
                feasible=len(frows),
                point_ns=ns,
            )
        alloc = state.get(ALLOCATION) or Allocation(node, row)
        self.cache.assume(pod, alloc, fw.handle.now() + self.assume_ttl)
        st = fw.run_permit(state, pod, node)
        ns["Reserve+Permit"] = clock() - t3
        decision = Decision(
            pod,
            Result.SCHEDULED,
            st,
            state,
            node=node,
            alloc=alloc,
            diagnosis=diag,
            scores=scores,
            feasible=len(frows),
            point_ns=ns,
        )
        if st.is_wait():
            decision.result = Result.WAITING
        elif not st.is_success():
            self.unwind(decision)
            decision.result = Result.UNSCHEDULABLE if st.is_rejected() else Result.ERROR
        return decision

    def unwind(self, decision: Decision) -> None:
        """Undo an assumed placement: Unreserve, then forget the pod in the cache."""
        self.fw.run_unreserve(decision.state, decision.pod, decision.node)
        self.cache.forget(decision.pod.uid)
        self.fw.waiting.remove(decision.pod.uid)

    async def bind(self, decision: Decision) -> Status:
        """The binding cycle. On any failure the placement is undone; the caller requeues."""
        fw, pod, node, state = self.fw, decision.pod, decision.node, decision.state
        st = await fw.wait_on_permit(pod)
        if st.is_success():
            st = await fw.run_pre_bind(state, pod, node)
        if st.is_success():
            st = await fw.run_bind(state, pod, node)
        if not st.is_success():
            self.unwind(decision)
            return st
        await fw.run_post_bind(state, pod, node)
        return st


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Drive a coroutine that never suspends (the simulator's binding cycle) without an
    event loop: a loop would cost more than the whole in-memory bind."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("run_sync: the coroutine suspended; use an event loop")

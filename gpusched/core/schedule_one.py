"""One pod's attempt, shared by the daemon and the simulator (kube-scheduler's schedule_one.go).

    attempt(info)                                   the scheduling cycle: synchronous
      gate: no profile, being deleted, or already in the cache (assumed) -> done, no attempt
      PreFilter -> Filter -> PostFilter -> PreScore -> Score -> select a node
      Reserve (the cards) -> assume in the cache -> Permit
      Success or Wait -> the caller runs bind(decision) (a task in the daemon, inline or
                         when the waiting pod resolves in the simulator)
      anything else   -> unwind what was done -> requeue -> observer
    bind(decision)                                  the binding cycle: may await
      wait on Permit -> PreBind -> Bind -> PostBind -> done (each of PreBind and Bind
      first checks the fence; Bind also that the node still exists)
      failure -> unwind -> requeue, or drop if the pod is gone or bound elsewhere -> observer

A Binding whose outcome is unknown (a timeout, a reset connection, a 5xx: it may have been
applied) is neither undone nor retried blindly: the pod stays assumed, holding its cards,
until a read of the pod or the watch settles it. A pod whose Binding succeeded stays
assumed until the watch confirms it, however long that takes: expiring it would free cards
a running pod holds (kube-scheduler stopped expiring such pods for the same reason).

Unwinding is one path for every failure after Reserve: Unreserve (every Reserve plugin,
reverse order; Unreserve is idempotent), forget the assumed pod, then tell the queue that
capacity was freed (AssignedPodDelete), as kube-scheduler's handleBindingCycleError does; a
rejected pod is parked first so that event does not move it straight back.

The daemon keeps only the lifecycle (watches, leader election, tasks, signals); the
simulator only its clock and its in-memory cluster. Both drive this object, so queueing,
Permit waiting, backoff and requeue behave the same in both.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from gpusched.core.cache.cache import ClusterCache
from gpusched.core.dra_ledger import DraLedger
from gpusched.core.queue import ClusterEvent, QueuedPodInfo, SchedulingQueue
from gpusched.core.runtime.framework import Framework, ScoreResult
from gpusched.framework.cycle_state import CycleState
from gpusched.framework.dra import NO_DRA, DraPort
from gpusched.framework.interfaces import ALLOCATION, PODS_TO_ACTIVATE, Allocation, Diagnosis
from gpusched.framework.status import (
    ClusterWriteError,
    Code,
    Status,
    ends_attempt,
    outcome_unknown,
)
from gpusched.model.pod import PodInfo

_log = logging.getLogger(__name__)


class Result(enum.Enum):
    """Where the scheduling cycle left the pod."""

    SCHEDULED = "scheduled"  # assumed; the binding cycle is next
    WAITING = "waiting"  # assumed and parked at Permit; the binding cycle waits for it
    UNSCHEDULABLE = "unschedulable"
    ERROR = "error"


class Outcome(enum.Enum):
    """How an attempt ended, as the decision record's `result` says it."""

    BOUND = "bound"
    UNSCHEDULABLE = "unschedulable"  # requeued to wait for a cluster event
    ERROR = "error"  # a plugin or the scheduler failed; requeued with backoff
    BIND_FAILED = "bind_failed"  # PreBind or Bind failed; requeued with backoff
    DROPPED = "dropped"  # the pod is gone or bound elsewhere: nothing to retry


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
    # Plugins that rejected the pod (PreFilter, every Filter that rejected a node, Reserve,
    # Permit, PreBind/Bind): the queue's requeue hint reads them.
    rejected_by: frozenset[str] = frozenset()
    started: float = 0.0  # perf_counter() when the attempt began: its duration's origin
    # The framework of the scheduling cycle: the binding cycle finishes with it even when a
    # configuration reload (daemon/reload.py) has replaced the profile's framework since.
    framework: Framework | None = None
    # How many nodes shared the top total score (the tie-break chose among them; 1: none
    # tied); 0 when no node was selected by score (none chosen, or the nominated node).
    tied: int = 0

    @property
    def message(self) -> str:
        """kube-scheduler's "0/N nodes are available: ..." when no node passed PreFilter and
        Filter; otherwise what the plugin that rejected the pod said (Reserve, Permit)."""
        if self.diagnosis is not None and self.result is Result.UNSCHEDULABLE and not self.feasible:
            return self.diagnosis.message()
        return self.status.message()


class Settled(enum.Enum):
    """What reading the pod said about a Binding whose outcome was unknown."""

    BOUND_HERE = "bound here"  # it landed: the pod is ours, as if the Binding had succeeded
    BOUND_ELSEWHERE = "bound elsewhere"  # another scheduler won: nothing to retry
    GONE = "gone"  # deleted (or deleted and re-created under the same name)
    UNBOUND = "unbound"  # it did not land and no longer can: undo and retry


class _SettledElsewhereError(ClusterWriteError):
    """A Binding of unknown outcome settled as gone or bound elsewhere: nothing to retry."""

    final = True


class _FencedError(ClusterWriteError):
    """This instance may not write now (the Lease is not held, or not freshly renewed)."""


ReadPod = Callable[[PodInfo], Awaitable[PodInfo | None]]
"""The pod as the API has it now (None: 404); raises if the API cannot be read."""


class Observer:
    """Told how every attempt ended: the daemon logs the decision record, writes Events
    and the PodScheduled condition and counts metrics (daemon/reporting.py); the simulator
    heats the node (sim/engine.py). This base hears and does nothing."""

    def finished(
        self,
        info: QueuedPodInfo,
        decision: Decision,
        outcome: Outcome,
        message: str | None,
        bind_us: Mapping[str, float] | None,
    ) -> None:
        """`message` None: the decision's own (`decision.message`, kube-scheduler's "0/N
        nodes are available: ..."), left to the observer to compute: the simulator never
        reads it, and counting the rejection reasons costs ~60 us a pod."""
        return None

    def raised(self, info: QueuedPodInfo, exc: Exception) -> None:
        """An attempt raised (a scheduler bug): it cost this attempt, nothing else."""
        return None


class ScheduleOne:
    def __init__(
        self,
        frameworks: Mapping[str, Framework],
        cache: ClusterCache,
        queue: SchedulingQueue,
        *,
        clock: Callable[[], float],
        observer: Observer | None = None,
        keep_scores: bool = False,
        fence: Callable[[], str | None] | None = None,
        read_pod: ReadPod | None = None,
        settle_after: float = 60.0,
        settle_backoff: tuple[float, float] = (0.5, 10.0),
        dra: DraPort = NO_DRA,
    ) -> None:
        self.frameworks = dict(frameworks)
        self.cache = cache
        # The cards allocated DRA devices hold (any scheduler's claims and ours in flight).
        self.dra_ledger = DraLedger(cache, dra)
        self.queue = queue
        self.clock = clock
        self.observer = observer or Observer()
        # Why this instance may not write to the cluster now (None: it may); asked right
        # before PreBind and before Bind, so a deposed leader's bindings stop there.
        self.fence = fence
        # How an unknown binding outcome is settled: without a reader, it counts as failed
        # (the simulator's cluster always answers).
        self.read_pod = read_pod
        # A Binding the API server has not applied within its request timeout (kube-
        # apiserver's --request-timeout, 60 s by default) never will be: only then does
        # "the pod is unbound" prove that it did not land.
        self.settle_after = settle_after
        self.settle_backoff = settle_backoff
        # The decision record lists the top nodes with each plugin's score; the simulator's
        # hot path does not need them.
        self.keep_scores = keep_scores
        self.attempts = 0
        self.bound = 0

    # -- the scheduling cycle ---------------------------------------------------------------

    def attempt(self, info: QueuedPodInfo) -> Decision | None:
        """Schedule one popped pod. A Decision whose result is SCHEDULED or WAITING needs
        `bind(info, decision)` next; every other ending is handled here (requeue, observer).
        None: the pod needed no attempt (not ours, being deleted, or already assumed)."""
        pod = info.pod
        fw = self.frameworks.get(pod.scheduler_name)
        if fw is None or pod.deleting or self.cache.get(pod.uid) is not None:
            # Assumed already: its binding is in flight or done and not yet confirmed by the
            # watch; a second attempt would hand out a second set of cards.
            self.queue.done(pod.uid)
            return None
        self.attempts += 1
        t0 = time.perf_counter()
        try:
            decision = self.schedule(fw, pod)
        except Exception as exc:  # a bug must cost one attempt, not the scheduler
            self._undo_after_raise(fw, pod)
            self.queue.requeue(info, unschedulable=False)
            self._raised(info, exc)
            return None
        decision.started = t0
        decision.framework = fw
        if decision.result in (Result.SCHEDULED, Result.WAITING):
            # As kube-scheduler: only a successful scheduling cycle moves the pods it named
            # up. Activating them after a failure too let two members of a gang that
            # PreFilter admitted and Filter refused wake each other forever, past backoff.
            if activate := decision.state.get(PODS_TO_ACTIVATE):
                activate.discard(pod.uid)
                self.queue.activate(activate)
            return decision
        unschedulable = decision.result is Result.UNSCHEDULABLE
        self.queue.requeue(info, unschedulable=unschedulable, rejected_by=decision.rejected_by)
        if unschedulable:
            self._finished(info, decision, Outcome.UNSCHEDULABLE, None, None)
        else:
            message = f"scheduler error: {decision.status}"
            self._finished(info, decision, Outcome.ERROR, message, None)
        return decision

    def schedule(self, fw: Framework, pod: PodInfo) -> Decision:
        """The scheduling cycle proper: no await from reading the snapshot to assuming the pod,
        so no event changes the columns under it. Undoes its own partial work on failure."""
        state = CycleState()
        clock = time.perf_counter_ns
        ns: dict[str, int] = {}
        t0 = clock()
        # Allocated DRA devices charge their cards before anything reads the columns.
        self.dra_ledger.sync()
        pod = fw.expand(pod)
        rows, st = fw.run_pre_filter(state, pod)
        t1 = clock()
        ns["PreFilter"] = t1 - t0
        if not st.is_success():
            diag = Diagnosis(total_nodes=fw.handle.snapshot.size, pre_filter_status=st)
            if st.code is Code.ERROR:
                return Decision(
                    pod,
                    Result.ERROR,
                    st,
                    state,
                    diagnosis=diag,
                    point_ns=ns,
                    rejected_by=_plugin(st),
                )
            # kube-scheduler runs PostFilter after a PreFilter rejection too (its FitError):
            # a gang member refused here must release the siblings waiting at Permit.
            nominated, pst = fw.run_post_filter(state, pod, diag)
            ns["PostFilter"] = clock() - t1
            if pst.code is Code.ERROR:
                return Decision(pod, Result.ERROR, pst, state, diagnosis=diag, point_ns=ns)
            return Decision(
                pod,
                Result.UNSCHEDULABLE,
                st,
                state,
                diagnosis=diag,
                nominated=nominated,
                point_ns=ns,
                rejected_by=_plugin(st),
            )
        feasible, diag, st = fw.run_filter(state, pod, fw.candidates(rows))
        t2 = clock()
        ns["Filter"] = t2 - t1
        if not st.is_success():
            return Decision(
                pod, Result.ERROR, st, state, diagnosis=diag, point_ns=ns, rejected_by=_plugin(st)
            )
        frows = np.flatnonzero(feasible)
        if len(frows) == 0:
            nominated, pst = fw.run_post_filter(state, pod, diag)
            ns["PostFilter"] = clock() - t2
            if pst.code is Code.ERROR:
                return Decision(pod, Result.ERROR, pst, state, diagnosis=diag, point_ns=ns)
            status = Status(Code.UNSCHEDULABLE, (diag.message(),), pst.plugin)
            return Decision(
                pod,
                Result.UNSCHEDULABLE,
                status,
                state,
                diagnosis=diag,
                nominated=nominated,
                point_ns=ns,
                rejected_by=diag.rejected_by,
            )
        st = fw.run_pre_score(state, pod, frows)
        t25 = clock()
        ns["PreScore"] = t25 - t2
        if not st.is_success():
            return Decision(
                pod, Result.ERROR, st, state, diagnosis=diag, feasible=len(frows), point_ns=ns
            )
        scores, st = fw.run_score(state, pod, frows, keep=self.keep_scores)
        t3 = clock()
        ns["Score"] = t3 - t25
        if scores is None:
            return Decision(
                pod, Result.ERROR, st, state, diagnosis=diag, feasible=len(frows), point_ns=ns
            )
        row, tied = fw.select_tied(scores, fw.nominated_row(pod))
        node = fw.handle.snapshot.names[row]
        decision = Decision(
            pod,
            Result.SCHEDULED,
            Status(),
            state,
            node=node,
            diagnosis=diag,
            scores=scores,
            feasible=len(frows),
            point_ns=ns,
            tied=tied,
        )
        # Unlike kube-scheduler, Reserve runs before assume: GPUFit's Reserve chooses the
        # cards, and the cache assumes the pod with exactly those cards.
        st = fw.run_reserve(state, pod, node)
        if not st.is_success():
            # run_reserve has unreserved the plugins it ran; nothing was assumed.
            decision.status = st
            decision.result = Result.UNSCHEDULABLE if st.is_rejected() else Result.ERROR
            decision.rejected_by = _plugin(st)
            ns["Reserve+Permit"] = clock() - t3
            return decision
        alloc = state.get(ALLOCATION)
        if alloc is None:
            if pod.request.gpu_milli_total > 0:
                # A GPU pod without cards would be assumed holding nothing: the next pod
                # gets the same cards. Never: the attempt fails loudly instead.
                fw.run_unreserve(state, pod, node)
                decision.status = Status(
                    Code.ERROR,
                    (
                        f"pod {pod.key} asks for GPUs but no Reserve plugin chose its cards"
                        " (enable GPUFit at Reserve)",
                    ),
                )
                decision.result = Result.ERROR
                ns["Reserve+Permit"] = clock() - t3
                return decision
            alloc = Allocation(node, row)
        decision.alloc = alloc
        self.cache.assume(pod, alloc)
        st = fw.run_permit(state, pod, node)
        ns["Reserve+Permit"] = clock() - t3
        decision.status = st
        if st.is_wait():
            decision.result = Result.WAITING
        elif not st.is_success():
            self._unwind(fw, decision)  # kube-scheduler sends no event here either
            decision.result = Result.UNSCHEDULABLE if st.is_rejected() else Result.ERROR
            decision.rejected_by = _plugin(st)
        return decision

    # -- the binding cycle ------------------------------------------------------------------

    async def bind(self, info: QueuedPodInfo, decision: Decision) -> Outcome:
        """Wait at Permit, then PreBind, Bind, PostBind. Never raises for a failed binding
        nor for a bug after it: the placement is undone and the pod requeued (or dropped)
        here. Only cancellation propagates, after undoing the placement."""
        fw = decision.framework or self.frameworks[decision.pod.scheduler_name]
        pod, node, state = decision.pod, decision.node, decision.state
        tb = time.perf_counter_ns()
        settled = ""
        try:
            st = await fw.wait_on_permit(pod)
            if st.is_success():
                st = self._fenced()
            if st.is_success():
                st = await fw.run_pre_bind(state, pod, node)
            if st.is_success():
                st = self._fenced()
            if st.is_success():
                st = self._node_still_there(pod, node)
            if st.is_success():
                sent = self.clock()
                st = await fw.run_bind(state, pod, node)
                if outcome_unknown(st) and self.read_pod is not None:
                    st, settled = await self._settle(pod, node, st, sent)
        except Exception as exc:  # a bug: the placement is undone, the pod retried
            st = Status(Code.ERROR, (f"binding cycle raised {exc!r}",), "", exc)
        except BaseException:
            # Cancelled (shutdown, lost lease): undo the placement; the next leader retries.
            if self._unwind(fw, decision):
                self._freed(pod)
            raise
        try:
            if not st.is_success():
                return self._bind_failed(info, decision, st, tb)
            # Bound: the bookkeeping first, so nothing after it (PostBind, a cancellation)
            # can leave the pod in flight. The pod stays assumed until the watch confirms
            # it, never expired: its cards are in use on the node.
            self.bound += 1
            self.queue.done(pod.uid)
            cards = decision.alloc.cards if decision.alloc else ()
            where = node + (f" (cards {','.join(map(str, cards))})" if cards else "")
            message = f"bound to {where}" + (f" ({settled})" if settled else "")
            self._finished(info, decision, Outcome.BOUND, message, _us(tb))
        except Exception as exc:  # a scheduler bug after the binding cycle: log, retry
            _log.exception("finishing the binding of %s raised", pod.key)
            self.queue.requeue(info, unschedulable=False)
            self._raised(info, exc)
            return Outcome.ERROR
        await fw.run_post_bind(state, pod, node)
        return Outcome.BOUND

    def _fenced(self) -> Status:
        reason = self.fence() if self.fence is not None else None
        if reason is None:
            return Status()
        message = f"not binding: {reason}"
        return Status(Code.ERROR, (message,), "", _FencedError(message))

    def _node_still_there(self, pod: PodInfo, node: str) -> Status:
        """The node was deleted while the pod waited at Permit or in PreBind: the API server
        would still accept a Binding to it (it does not check the node exists), leaving a
        pod bound to nothing that never runs. Undo and retry elsewhere instead."""
        if self.cache.snapshot.row_of(node) >= 0:
            return Status()
        return Status(Code.ERROR, (f"node {node} no longer exists; not binding {pod.key} to it",))

    async def _settle(
        self, pod: PodInfo, node: str, failed: Status, sent: float
    ) -> tuple[Status, str]:
        """Keep the pod assumed until its unknown binding outcome is known: from the watch
        (the cache confirms or drops the pod) or from reading the pod. Returns the status
        to go on with and, if the Binding landed, the words for the decision record."""
        assert self.read_pod is not None
        first, cap = self.settle_backoff
        delay = first
        why = failed.message() or str(failed)
        _log.warning("binding of %s: outcome unknown (%s); settling it", pod.key, why)
        while True:
            entry = self.cache.get(pod.uid)
            if entry is None:
                found: Settled | None = Settled.GONE  # the watch saw it deleted
            elif not entry.assumed:  # the watch saw it bound
                found = Settled.BOUND_HERE if entry.node == node else Settled.BOUND_ELSEWHERE
            else:
                try:
                    current = await self.read_pod(pod)
                except Exception as exc:  # the API is still unreachable: keep holding
                    _log.warning("reading %s to settle its binding: %r", pod.key, exc)
                    found = None
                else:
                    found = self._settled(pod, node, current, sent)
            if found is Settled.BOUND_HERE:
                return Status(), f"the Binding's answer was lost ({why}); the pod shows it landed"
            if found is Settled.UNBOUND:
                return failed, ""
            if found is not None:
                message = f"bind {pod.key}: outcome unknown ({why}); the pod is {found.value}"
                return Status(
                    Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                    (message,),
                    "",
                    _SettledElsewhereError(message),
                ), ""
            await asyncio.sleep(delay)
            delay = min(cap, delay * 2)

    def _settled(
        self, pod: PodInfo, node: str, current: PodInfo | None, sent: float
    ) -> Settled | None:
        if current is None or current.uid != pod.uid:
            return Settled.GONE
        if current.node_name:
            return Settled.BOUND_HERE if current.node_name == node else Settled.BOUND_ELSEWHERE
        if self.clock() - sent >= self.settle_after:
            return Settled.UNBOUND
        return None  # may still land: keep the cards held and look again

    def _bind_failed(self, info: QueuedPodInfo, decision: Decision, st: Status, tb: int) -> Outcome:
        fw = decision.framework or self.frameworks[decision.pod.scheduler_name]
        uid = decision.pod.uid
        freed = self._unwind(fw, decision)
        decision.status = st
        message = st.message() or str(st)
        if ends_attempt(st) or info.deleted:
            # Gone or already bound: nothing to retry, and no storm of 409s.
            decision.result = Result.ERROR
            self.queue.done(uid)
            if freed:
                self._freed(decision.pod)
            self._finished(info, decision, Outcome.DROPPED, message, _us(tb))
            return Outcome.DROPPED
        rejected = st.is_rejected()
        # kube-scheduler: a rejected pod is parked before the freed capacity moves others,
        # so the event does not send the pod that just failed straight back.
        decision.result = Result.UNSCHEDULABLE if rejected else Result.ERROR
        self.queue.requeue(info, unschedulable=rejected, rejected_by=_plugin(st))
        if freed:
            self._freed(decision.pod)
        outcome = Outcome.UNSCHEDULABLE if rejected else Outcome.BIND_FAILED
        if not rejected:
            message = f"binding rejected: {message}"
        self._finished(info, decision, outcome, message, _us(tb))
        return outcome

    # -- reporting --------------------------------------------------------------------------

    def _finished(
        self,
        info: QueuedPodInfo,
        decision: Decision,
        outcome: Outcome,
        message: str | None,
        bind_us: Mapping[str, float] | None,
    ) -> None:
        # The pod's fate is settled before the report; a failing report (a logging or
        # metrics bug, a malformed filter result met while counting reasons) must not undo
        # that nor stop the loop.
        try:
            self.observer.finished(info, decision, outcome, message, bind_us)
        except Exception:
            _log.exception("reporting the attempt of %s raised", info.pod.key)

    def _raised(self, info: QueuedPodInfo, exc: Exception) -> None:
        try:
            self.observer.raised(info, exc)
        except Exception:
            _log.exception("reporting the failed attempt of %s raised", info.pod.key)

    # -- unwinding --------------------------------------------------------------------------

    def _unwind(self, fw: Framework, decision: Decision) -> bool:
        """Undo a placement whose binding failed: Unreserve (always: the pod may already be
        gone from the cache, deleted while it waited, or bound elsewhere, but its
        reservations are not), drop it from Permit, forget the assumed pod. True if that
        freed capacity in the cache. A pod the watch has confirmed bound here is never
        touched; one confirmed elsewhere keeps the cache entry the watch made."""
        pod = decision.pod
        entry = self.cache.get(pod.uid)
        if entry is not None and not entry.assumed and entry.node == decision.node:
            return False  # the Binding landed after all: the API's truth, nothing to undo
        fw.run_unreserve(decision.state, pod, decision.node)
        fw.waiting.remove(pod.uid)
        return self.cache.forget(pod.uid) is not None

    def _freed(self, pod: PodInfo) -> None:
        # A gang's members are undone together (its Permit rejects them all): the cards
        # one frees must not wake a sibling parked a moment earlier, nor count as an event
        # a sibling still in flight missed, or the gang that just failed retries at once.
        gang = pod.gang.name if pod.gang is not None else ""
        self.queue.move_all(ClusterEvent.ASSIGNED_POD_DELETE, exclude=pod.uid, exclude_gang=gang)

    def _undo_after_raise(self, fw: Framework, pod: PodInfo) -> None:
        # It raised after assuming the pod (a bug in the runtime) and no binding cycle owns
        # the placement: drop it, or the capacity leaks and every later attempt sees an
        # assumed pod and skips it. Reserve plugins keep no state for an attempt that
        # raised before returning a Decision, so there is no cycle state to Unreserve with.
        if self.cache.is_assumed(pod.uid):
            self.cache.forget(pod.uid)
            fw.waiting.remove(pod.uid)
            self._freed(pod)


def _plugin(st: Status) -> frozenset[str]:
    return frozenset((st.plugin,)) if st.plugin else frozenset()


def _us(t0_ns: int) -> dict[str, float]:
    return {"Binding": (time.perf_counter_ns() - t0_ns) / 1e3}

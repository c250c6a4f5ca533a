"""The simulator: the daemon's scheduling loop over an in-memory cluster and a virtual clock.

Everything a pod meets is the daemon's: the event handlers (core/events.py), the queue, the
framework and plugins, and ScheduleOne (core/schedule_one.py: attempt, assume, bind, unwind,
requeue, Permit waiting). Only three things differ, each the simulator's by nature:

* the ClusterPort (`InMemoryCluster`): a bind is delivered to the event handlers at once,
  as the daemon's pod watch would deliver it, with the annotations written at PreBind;
* the clock: virtual, advanced by the caller (`advance`), which also times Permit waits out
  and flushes the backoff queue, as the daemon's 1 s ticker does (and integrates the cards
  pods waiting at Permit hold: `permit_idle_gpu_hours`);
* GPU telemetry: given a `HeatEnvironment`, the cards heat with the work bound to them over
  the virtual clock (sim/thermal.py) and the plugins see them only through sampled, delayed
  readings applied by the daemon's ingestion at its refresh ticks (sim/telemetry_feed.py);
  without one, no node reports anything (the plugins see "no data", neutral);
* the binding cycle runs inline (its ports never suspend) instead of as an asyncio task; a
  pod parked at Permit resumes its binding cycle when the waiting pod is resolved;
* the DisruptionPort (`InMemoryCluster` again): an eviction removes the victim as its
  departure would, at once (no grace period), and records the GPU-hours of work it lost
  (`Simulation.evictions`, `preempted_gpu_hours`, `on_evicted`); a nomination is recorded.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from gpusched.config.profile import Profile
from gpusched.config.settings import Telemetry
from gpusched.core.cache.cache import ClusterCache
from gpusched.core.cache.snapshot import Snapshot
from gpusched.core.events import ClusterEvents
from gpusched.core.handle import SchedulerHandle
from gpusched.core.queue import QueuedPodInfo, SchedulingQueue
from gpusched.core.queue.queue import GATED
from gpusched.core.runtime.framework import Framework, TieBreak, pre_enqueue_of
from gpusched.core.schedule_one import Decision, Observer, Outcome, Result, ScheduleOne
from gpusched.framework.disruption import Budget
from gpusched.framework.dra import NO_DRA, DraPort
from gpusched.framework.gangs import NO_GANGS, GangPort
from gpusched.framework.registry import Registry
from gpusched.framework.status import ClusterWriteError, Code, Status
from gpusched.framework.tenancy import NO_TENANCY, TenancyPort
from gpusched.model import keys
from gpusched.model.lost_work import lost_gpu_hours
from gpusched.model.node import NodeModel
from gpusched.model.pod import PodInfo, parse_gpu_ids
from gpusched.sim.telemetry_feed import SampledTelemetry, Sampling
from gpusched.sim.thermal import HeatEnvironment, HeatModel
from gpusched.telemetry.ingest import TelemetryIngest

T = TypeVar("T")


class VirtualClock:
    def __init__(self, start: float = 0.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance_to(self, t: float) -> None:
        self.t = max(self.t, t)


class AlreadyBoundError(ClusterWriteError):
    """The API's 409 for a second binding of one pod: the attempt ends, no retry."""

    final = True


@dataclasses.dataclass(frozen=True, slots=True)
class Eviction:
    """One victim of preemption in the simulator: who, for whom, when, what it lost."""

    victim: PodInfo
    preemptor: PodInfo
    node: str
    at: float
    lost_gpu_hours: float


class InMemoryCluster:
    """The ClusterPort and the DisruptionPort of the simulator."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self.events: ClusterEvents | None = None
        self.bound: dict[str, PodInfo] = {}
        self.clock: Callable[[], float] = clock or (lambda: 0.0)
        self.evictions: list[Eviction] = []
        self.nominated: dict[str, str] = {}
        # PodDisruptionBudgets: (budget, which pods it covers); the simulator's workloads
        # have none unless a test or a replay puts them here.
        self.budgets: list[tuple[Budget, Callable[[PodInfo], bool]]] = []
        # Told of every eviction (the replay report counts them).
        self.on_evicted: Callable[[Eviction], None] | None = None
        # Told of every pod leaving a node (deleted or evicted): its cards stop heating.
        self.on_deleted: Callable[[PodInfo], None] | None = None

    async def bind(
        self, pod: PodInfo, node: str, annotations: Mapping[str, str] | None = None
    ) -> Status:
        if pod.uid in self.bound:
            message = f"pod {pod.key} is already bound"
            return Status(Code.ERROR, (message,), "", AlreadyBoundError(message))
        # As the API server does: the Binding's annotations land with the node name.
        ann = {**pod.annotations, **(annotations or {})}
        raw = ann.get(keys.GPU_IDS)
        ids = parse_gpu_ids(raw) if raw else ()
        bound = dataclasses.replace(
            pod,
            node_name=node,
            annotations=ann,
            gpu_ids=ids,
            phase="Running",
            # 0.0 means "not started" (model/pod.py): a pod bound at the virtual clock's
            # origin starts a hair after it.
            start_time=pod.start_time or max(self.clock(), 1e-6),
        )
        self.bound[pod.uid] = bound
        assert self.events is not None
        self.events.pod_changed(bound)  # what the daemon's pod watch delivers next
        return Status()

    def delete(self, pod: PodInfo) -> None:
        self.bound.pop(pod.uid, None)
        assert self.events is not None
        self.events.pod_deleted(pod)
        if self.on_deleted is not None:
            self.on_deleted(pod)

    # -- DisruptionPort ----------------------------------------------------------------------

    def budgets_of(self, pod: PodInfo) -> Sequence[Budget]:
        return tuple(b for b, covers in self.budgets if covers(pod))

    async def evict(
        self, victim: PodInfo, *, preemptor: PodInfo, node: str, message: str
    ) -> Status:
        bound = self.bound.get(victim.uid)
        if bound is None:
            return Status()  # already gone
        now = self.clock()
        eviction = Eviction(bound, preemptor, node, now, lost_gpu_hours(bound, now))
        self.evictions.append(eviction)
        self.delete(bound)
        if self.on_evicted is not None:
            self.on_evicted(eviction)
        return Status()

    async def nominate(self, pod: PodInfo, node: str) -> Status:
        if node:
            self.nominated[pod.uid] = node
        else:
            self.nominated.pop(pod.uid, None)
        return Status()


class _Observer(Observer):
    """Starts a bound pod's work on its cards (the heat model), and tells the simulation's
    caller."""

    def __init__(self, on_started: Callable[[Decision], None]) -> None:
        self.on_started = on_started
        self.on_bound: Callable[[Decision], None] | None = None
        self.errors = 0
        # ScheduleOne logs and swallows a failing report (the daemon must go on); the
        # simulator's caller must hear of a bug in its own callback instead.
        self.failure: Exception | None = None

    def finished(
        self,
        info: QueuedPodInfo,
        decision: Decision,
        outcome: Outcome,
        message: str | None,
        bind_us: Mapping[str, float] | None,
    ) -> None:
        if outcome in (Outcome.ERROR, Outcome.BIND_FAILED):
            self.errors += 1
        if outcome is Outcome.BOUND:
            self.on_started(decision)
            if self.on_bound is not None:
                try:
                    self.on_bound(decision)
                except Exception as exc:
                    self.failure = exc


class Simulation:
    def __init__(
        self,
        nodes: Iterable[NodeModel],
        profile: Profile,
        registry: Registry,
        *,
        seed: int = 0,
        heat: HeatEnvironment | None = None,
        sampling: Sampling | None = None,
        telemetry: Telemetry | None = None,
        max_cards: int = 8,
        tie_break: TieBreak | None = None,
        gangs: GangPort = NO_GANGS,
        dra: DraPort = NO_DRA,
        tenancy: TenancyPort = NO_TENANCY,
    ) -> None:
        """`tenancy`: tenants and their quotas (a StaticTenancy: namespaces to tenants,
        TenantQuota per tenant), so ElasticQuota is simulated as it runs in the daemon.
        `heat`: the GPU nodes' physical sites (sim/thermal.py), `sampling` how their
        readings are scraped (sim/telemetry_feed.py), `telemetry` the daemon's telemetry
        settings (refresh interval, staleness, health limits)."""
        node_list = list(nodes)
        self.clock = VirtualClock()
        self.cache = ClusterCache(Snapshot(max_cards, capacity=max(64, len(node_list))))
        self.cluster = InMemoryCluster(self.clock)
        # DRA: the simulator's in-memory claims and slices (framework/dra.py MemoryDra),
        # when the workload has them; nodes then take their cards from the slices.
        self.dra = dra
        self.handle = SchedulerHandle(
            self.cache,
            self.cluster,
            self.clock,
            gangs=gangs,
            dra=dra,
            tenancy=tenancy,
            disruption=self.cluster,
        )
        self.fw = Framework(
            profile,
            registry,
            self.handle,
            seed=seed,
            tie_break=tie_break,
            waiting=self.handle.waiting,
        )
        self.queue = SchedulingQueue(
            self.fw.less,
            self.clock,
            pre_enqueue=pre_enqueue_of({self.name: self.fw}),
            fair=self.fw.fair,
        )
        self.queue.tenant_of = tenancy.tenant_of
        queue = self.queue
        self.handle.pending = lambda uid: bool(queue.where(uid))
        self.events = ClusterEvents(
            self.cache,
            self.queue,
            [self.fw.waiting],
            [self.name],
            gangs=self.handle.gang_index,
            dra=dra,
        )
        self.cluster.events = self.events
        for node in node_list:
            self.events.node_changed(node)  # the daemon's node watch, at start-up
        settings = telemetry or Telemetry()
        # The daemon's ingestion: the only writer of the snapshot's telemetry columns.
        self.ingest = TelemetryIngest(self.cache.snapshot, settings)
        self.heat: HeatModel | None = None
        self.feed: SampledTelemetry | None = None
        if heat is not None:
            self.heat = HeatModel(self.cache.snapshot, heat)
            self.feed = SampledTelemetry(
                self.heat,
                self.ingest,
                sampling or Sampling(),
                refresh_s=settings.interval_seconds,
                seed=heat.seed,
                on_applied=self.fw.telemetry_updated,
            )
        # Wall time spent simulating the cards and their telemetry (not scheduling).
        self.telemetry_seconds = 0.0
        self.cluster.on_deleted = self._stopped
        self.observer = _Observer(self._started)
        self.schedule_one = ScheduleOne(
            {self.name: self.fw},
            self.cache,
            self.queue,
            clock=self.clock,
            observer=self.observer,
            dra=dra,
        )
        self._ready: list[tuple[QueuedPodInfo, Decision]] = []
        self._decisions: dict[str, Decision] = {}
        # Pods parked at Permit (assumed, not bound): milli-GPU held, integrated over the
        # virtual clock by `advance` (a gang's members waiting for the rest hold idle cards).
        self._permit_held: dict[str, int] = {}
        self._permit_idle_milli_s = 0.0

    def _started(self, decision: Decision) -> None:
        alloc = decision.alloc
        if self.heat is not None and alloc is not None:
            self.advance_heat(self.clock())
            self.heat.bind(decision.pod.uid, alloc.node, alloc.cards, alloc.milli)

    def _stopped(self, pod: PodInfo) -> None:
        if self.heat is not None:
            self.advance_heat(self.clock())
            self.heat.release(pod.uid)

    def advance_heat(self, t: float) -> None:
        """Run the cards and their telemetry (scrapes, the daemon's refresh) to `t`
        without the scheduling loop: a caller removing pods at `t` before `advance(t)`
        calls this first, so they stop heating at `t`. Never goes back."""
        if self.heat is not None and self.feed is not None and t > self.heat.t:
            t0 = time.perf_counter()
            # The exporter scrapes and the daemon refreshes up to `t`, then the cards run.
            self.feed.advance(t)
            self.heat.advance_to(t)
            self.telemetry_seconds += time.perf_counter() - t0

    def on_bound(self, callback: Callable[[Decision], None] | None) -> None:
        """Call `callback` with the decision of every pod the loop binds (also pods retried
        after an event, which `submit` does not return)."""
        self.observer.on_bound = callback

    def on_evicted(self, callback: Callable[[Eviction], None] | None) -> None:
        """Call `callback` with every victim preemption evicts (after it is removed)."""
        self.cluster.on_evicted = callback

    @property
    def evictions(self) -> list[Eviction]:
        """Every victim evicted so far, in order."""
        return self.cluster.evictions

    @property
    def preempted_gpu_hours(self) -> float:
        """GPU-hours of work the evicted victims lost (since their last checkpoint)."""
        return sum(e.lost_gpu_hours for e in self.cluster.evictions)

    @property
    def errors(self) -> int:
        """Attempts that ended in an Error (a plugin or the scheduler failed)."""
        return self.observer.errors

    @property
    def name(self) -> str:
        return self.fw.scheduler_name

    @property
    def snapshot(self) -> Snapshot:
        return self.cache.snapshot

    def submit(self, pod: PodInfo, *, keep_scores: bool = False) -> Decision:
        """A pod arrives (the watch's ADDED) and the loop runs until nothing is ready. The
        pod's decision says where it went; an unplaced pod stays queued, as in the daemon,
        until `withdraw` or `delete` (the FGD protocol drops it at once). A pod held at
        PreEnqueue raises: feed such pods through `arrive`."""
        decision = self.arrive(pod, keep_scores=keep_scores)
        if decision is None:
            raise ValueError(
                f"pod {pod.key} is held at PreEnqueue (e.g. spec.schedulingGates, or a gang"
                " member before its minMember exist) and cannot be placed; feed it through"
                " `arrive` (or `events.pod_changed`) and ungate it by an update"
            )
        return decision

    def arrive(self, pod: PodInfo, *, keep_scores: bool = False) -> Decision | None:
        """A pod arrives that may be held at PreEnqueue (a gang member before its minMember
        pods exist, a pod with spec.schedulingGates): as `submit`, but a held pod returns
        None. It is attempted when what holds it changes (the gang's last member arrives, an
        update lifts its gates); `on_bound` reports its binding then. A pod parked at Permit
        returns its Result.WAITING decision; `on_bound` reports it once allowed and bound."""
        if pod.scheduler_name != self.name:
            pod = dataclasses.replace(pod, scheduler_name=self.name)
        if self.cache.get(pod.uid) is not None or self.queue.where(pod.uid):
            raise ValueError(f"pod {pod.key} ({pod.uid}) was already submitted")
        self.schedule_one.keep_scores = keep_scores
        self._decisions.clear()
        self.events.pod_changed(pod)
        self.run()
        decision = self._decisions.get(pod.uid)
        if decision is None and self.queue.where(pod.uid) == GATED:
            return None
        if decision is None:
            raise RuntimeError(f"pod {pod.key} was queued but never attempted")
        return decision

    def run(self) -> None:
        """The daemon's scheduling loop until activeQ is empty and no binding is ready."""
        s1 = self.schedule_one
        while True:
            if self._ready:
                ready, parked = self._ready.pop(0)
                run_sync(s1.bind(ready, parked))
                continue
            if self.observer.failure is not None:
                failure, self.observer.failure = self.observer.failure, None
                raise failure
            info = self.queue.pop_nowait()
            if info is None:
                return
            decision = s1.attempt(info)
            if decision is None:
                continue
            self._decisions[info.uid] = decision
            if decision.result is Result.SCHEDULED:
                run_sync(s1.bind(info, decision))
            elif decision.result is Result.WAITING:
                self._park(info, decision)

    def _park(self, info: QueuedPodInfo, decision: Decision) -> None:
        waiting = self.fw.waiting.get(info.uid)
        assert waiting is not None
        self._permit_held[info.uid] = sum(decision.alloc.milli) if decision.alloc else 0

        def resume() -> None:
            # Resumed from the loop, not inside whichever plugin resolves the wait (a gang's
            # last member allowing the others during its own cycle).
            self._permit_held.pop(info.uid, None)
            self._ready.append((info, decision))

        waiting.on_resolve(resume)

    @property
    def permit_idle_gpu_hours(self) -> float:
        """GPU-hours of cards held by pods waiting at Permit (assumed, not yet allowed),
        integrated over the virtual clock: the idle cost of a gang's members waiting for the
        rest. Time passes only in `advance`; a wait ends at its Permit deadline at the
        latest."""
        return self._permit_idle_milli_s / 1000.0 / 3600.0

    def advance(self, t: float) -> None:
        """Move the virtual clock to `t`: Permit waits time out, finished backoffs and
        long-unschedulable pods are retried (the daemon's ticker), and the loop runs."""
        now = self.clock()
        if t > now and self._permit_held:
            for uid, milli in self._permit_held.items():
                wp = self.fw.waiting.get(uid)
                until = min(t, wp.deadline) if wp is not None else t
                self._permit_idle_milli_s += milli * max(0.0, until - now)
        self.advance_heat(t)
        self.clock.advance_to(t)
        for waiting in self.fw.waiting:
            waiting.check_timeout(self.clock())
        self.queue.flush()
        self.run()

    def next_wakeup(self) -> float | None:
        """When `advance` next has something to do without a new event: a backoff ends, a
        long-unschedulable pod is due a retry, or a pod waiting at Permit times out."""
        times = [wp.deadline for wp in self.fw.waiting if not wp.done]
        if (queued := self.queue.next_wakeup()) is not None:
            times.append(queued)
        return min(times) if times else None

    def withdraw(self, uid: str) -> None:
        """A pod that has not started leaves (deleted before it started): out of the queue,
        and rejected if it waits at Permit, as the daemon's watch handler does."""
        self.queue.delete(uid)
        # Nor does it count for its gang any more (ClusterEvents.pod_deleted): a gang whose
        # members left would otherwise keep waiting for them, and a starving gang's node
        # reservation would outlive the gang.
        self.handle.gang_index.remove(uid)
        waiting = self.fw.waiting.get(uid)
        if waiting is not None:
            waiting.reject("", f"pod {uid} was withdrawn")
            self.run()  # its binding cycle resumes, fails and unwinds

    def delete(self, uid: str) -> None:
        """A placed pod leaves (the watch's DELETED): capacity freed, waiting pods moved."""
        entry = self.cache.get(uid)
        if entry is None:
            self.withdraw(uid)
            return
        self.cluster.delete(entry.pod)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Drive a coroutine that never suspends (the simulator's binding cycle) without an
    event loop: a loop would cost more than the whole in-memory bind."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("run_sync: the coroutine suspended; use an event loop")

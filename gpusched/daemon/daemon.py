"""The scheduler daemon: watches feed the cache and the queue; one loop pops pods and runs
the synchronous scheduling cycle; each placement gets an asyncio task for its binding cycle.

    nodes watch ──▶ cache.upsert_node / remove_node ──▶ queue.move_all(NodeAdd/Update)
    pods watch ──┬▶ bound or terminal: cache (confirms assumed pods)
                 ├▶ unbound, our schedulerName: queue.add
                 └▶ deleted: cache, queue, pods waiting at Permit
    loop: pop ─▶ cycle.schedule (no await) ─▶ SCHEDULED/WAITING: task(cycle.bind)
                                           └▶ UNSCHEDULABLE: Event + condition + queue
    timers: backoff flush, unschedulable flush, assumed-pod expiry
    leader election (gpusched/kube/lease.py): watches, cache and queue run from the start;
    the loop starts once this instance holds the Lease; losing it stops the daemon (exit 1)

Everything that touches the cache runs on the one event loop without awaiting in between,
which is the atomicity kube-scheduler gets from its cache lock.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog

from gpusched.config import SchedulerConfig
from gpusched.core.cache.cache import ClusterCache
from gpusched.core.cache.snapshot import Snapshot
from gpusched.core.handle import SchedulerHandle
from gpusched.core.queue import ClusterEvent, QueuedPodInfo, SchedulingQueue
from gpusched.core.runtime.framework import Framework
from gpusched.core.scheduler import Decision, Result, SchedulingCycle
from gpusched.daemon.warmup import warm_kernels
from gpusched.framework.registry import Registry
from gpusched.framework.status import Code, Status
from gpusched.kube.client import JSON, Kube
from gpusched.kube.lease import KubeLeases, LeaderElector, default_identity
from gpusched.kube.watch import EventType, Reflector
from gpusched.kube.writer import ClusterWriter, ObjectRef, final
from gpusched.model.node import NodeModel, TopologyKeys, node_from_k8s
from gpusched.model.pod import PodInfo, pod_from_k8s
from gpusched.observability.logging import decision_record
from gpusched.observability.metrics import Metrics

Logger = structlog.typing.FilteringBoundLogger

# kube-scheduler's informer skips finished pods: they hold nothing and would only grow the
# cache. A pod that finishes is seen as a deletion.
ACTIVE_PODS = ("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed")
TIMER_SECONDS = 1.0  # backoff flush and assumed-pod expiry, kube's 1 s ticker


@dataclass(frozen=True)
class DaemonOptions:
    bind_grace_seconds: float = 30.0  # SIGTERM: how long in-flight bindings may finish
    instance: str = ""  # reportingInstance of our Events (the pod name in a cluster)
    identity: str = ""  # holder identity in the leader Lease; default: pod name + random suffix
    warm_up: bool = True  # compile the kernels before seeking the Lease (daemon/warmup.py)
    watch_timeout_seconds: int = 300


class Daemon:
    def __init__(
        self,
        kube: Kube,
        config: SchedulerConfig,
        registry: Registry,
        logger: Logger,
        *,
        metrics: Metrics | None = None,
        options: DaemonOptions | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.config = config
        self.registry = registry
        self.log = logger
        self.metrics = metrics or Metrics()
        self.options = options or DaemonOptions()
        self.clock = clock
        self.cache = ClusterCache(Snapshot(config.max_cards_per_node, capacity=256))
        cc = config.client_connection
        self.writer = ClusterWriter(
            kube, qps=cc.qps, burst=cc.burst, instance=self.options.instance
        )
        self.handle = SchedulerHandle(self.cache, self.writer, clock)
        # One framework per profile; a pod goes to the one named by its schedulerName.
        self.frameworks: dict[str, Framework] = {
            p.scheduler_name: Framework(p, registry, self.handle) for p in config.profiles
        }
        self.cycles = {
            name: SchedulingCycle(fw, self.cache, assume_ttl=math.inf)
            for name, fw in self.frameworks.items()
        }
        first = next(iter(self.frameworks.values()))
        # The loader insists every profile uses the same QueueSort, so one queue orders all.
        self.queue = SchedulingQueue(
            first.less,
            clock,
            initial_backoff=config.pod_initial_backoff_seconds,
            max_backoff=config.pod_max_backoff_seconds,
            max_unschedulable=config.pod_max_in_unschedulable_pods_duration_seconds,
        )
        topo: TopologyKeys = config.topology_keys
        self.node_watch: Reflector[NodeModel] = Reflector(
            kube,
            "/api/v1/nodes",
            lambda raw: _node(raw, topo),
            self._on_node,
            name="nodes",
            watch_timeout=self.options.watch_timeout_seconds,
        )
        self.pod_watch: Reflector[PodInfo] = Reflector(
            kube,
            "/api/v1/pods",
            pod_from_k8s,
            self._on_pod,
            name="pods",
            query=[ACTIVE_PODS],
            watch_timeout=self.options.watch_timeout_seconds,
        )
        self._nodes: dict[str, NodeModel] = {}
        self._node_uids: dict[str, str] = {}
        self._warned: set[tuple[str, str]] = set()
        self.bindings: set[asyncio.Task[None]] = set()
        self._side: set[asyncio.Task[None]] = set()
        self._timings: dict[str, tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]] = {}
        self.ready = asyncio.Event()
        self.leading = asyncio.Event()  # the scheduling loop runs (we hold the Lease)
        self.stopped = asyncio.Event()  # run() has finished, the Lease released
        self._stop = asyncio.Event()
        le = config.leader_election
        self.elector: LeaderElector | None = None
        if le.leader_elect:
            self.elector = LeaderElector(
                KubeLeases(
                    kube, le.resource_namespace, le.resource_name, timeout=le.renew_deadline_seconds
                ),
                self.options.identity or default_identity(),
                lease_duration=le.lease_duration_seconds,
                renew_deadline=le.renew_deadline_seconds,
                retry_period=le.retry_period_seconds,
                log=logger,
                on_change=lambda leading: self.metrics.leader.set(1 if leading else 0),
            )
        self.attempts = 0
        self.bound = 0
        self.failed = False  # a core task died: `gpusched run` exits 1

    # -- lifecycle --------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop taking pods; `run` finishes the bindings in flight, releases the leader Lease
        and returns."""
        self._stop.set()

    @property
    def is_ready(self) -> bool:
        return self.ready.is_set()

    async def run(self) -> None:
        background = [
            asyncio.create_task(self.node_watch.run(), name="watch nodes"),
            asyncio.create_task(self.pod_watch.run(), name="watch pods"),
        ]
        loop_task: asyncio.Task[None] | None = None
        elector_task: asyncio.Task[None] | None = None
        try:
            # Nodes first, so the pods of the first list find their rows; both before the
            # first attempt, so a restarted scheduler sees every card in use before it
            # hands one out (kube-scheduler's WaitForCacheSync).
            synced = asyncio.gather(self.node_watch.synced.wait(), self.pod_watch.synced.wait())
            stop = asyncio.ensure_future(self._stop.wait())
            waiters: set[asyncio.Future[Any]] = {synced, stop}
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            if not synced.done():
                synced.cancel()
                # Retrieve the cancellation, or asyncio prints "_GatheringFuture exception
                # was never retrieved" with a traceback on a SIGTERM before the first sync.
                await asyncio.gather(synced, return_exceptions=True)
                return
            stop.cancel()
            self.log.info(
                "started",
                nodes=len(self._nodes),
                pods=len(self.cache.pods),
                queued=len(self.queue),
                profiles=list(self.frameworks),
            )
            self.ready.set()
            background.append(asyncio.create_task(self._timers(), name="timers"))
            if self.elector is not None:
                # A warm standby: watches, cache and queue stay current, so the moment we
                # lead, the first attempt sees the cluster as it is. Seeking the Lease only
                # after the sync (as kube-scheduler does) keeps an instance that cannot
                # list the cluster from holding it.
                if self.options.warm_up and not await self._warm_up():
                    return
                elector_task = asyncio.create_task(self.elector.run(), name="leader election")
                if not await self._until(self.elector.leading, {elector_task, *background}):
                    return
            else:
                self.metrics.leader.set(1)
                self.log.info("leader election disabled: scheduling without a lease")
            self.leading.set()
            loop_task = asyncio.create_task(self._loop(), name="scheduling loop")
            core = {loop_task, *background, *([elector_task] if elector_task else [])}
            await self._until(None, core)
        finally:
            self.queue.close()
            if loop_task is not None:
                await loop_task
            await self._drain()
            if self.elector is not None and elector_task is not None:
                # Only now, with the bindings done: releasing earlier would let a standby
                # place pods on cards our in-flight bindings are still claiming.
                self.elector.stop()
                await asyncio.gather(elector_task, return_exceptions=True)
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            self.leading.clear()
            self.metrics.leader.set(0)
            self.log.info("stopped", bound=self.bound, attempts=self.attempts)
            self.stopped.set()

    async def _warm_up(self) -> bool:
        """warm_kernels in a worker thread; False if stop() came first."""
        t0 = time.perf_counter()
        warm = asyncio.ensure_future(asyncio.to_thread(warm_kernels, self.config, self.registry))
        stop = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait({warm, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not warm.done():
            # A thread cannot be cancelled: it runs to its end (asyncio.run waits for it on
            # exit, a few seconds at most), touching nothing of ours meanwhile.
            return False
        if warm.exception() is not None:
            # Only an optimisation: the first cycles compile what is missing, as before.
            self.log.warning("kernel warm-up failed", error=repr(warm.exception()))
        else:
            self.log.info("kernels warmed up", seconds=round(time.perf_counter() - t0, 2))
        return True

    async def _until(self, event: asyncio.Event | None, core: set[asyncio.Task[None]]) -> bool:
        """Wait for `event` (None: for nothing), stop(), or a core task to end. True when
        `event` is set. A core task ending on its own (a watch, the timers, the loop, the
        elector after losing the Lease) means a frozen cache, nobody scheduling, or another
        instance now scheduling: stop and exit non-zero so the kubelet restarts us (a
        restart re-syncs cleanly), rather than serve /healthz on stale state."""
        stop = asyncio.ensure_future(self._stop.wait())
        want = asyncio.ensure_future(event.wait()) if event is not None else None
        waiters: set[asyncio.Future[Any]] = {stop, *core, *([want] if want else [])}
        try:
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if want is not None:
                want.cancel()
        if event is not None and event.is_set() and not self._stop.is_set():
            return True
        for task in core & done:
            if self._stop.is_set():
                break
            if self.elector is not None and self.elector.lost.is_set():
                self.log.error(
                    "stopping: leadership lost; exiting so that a restart re-syncs",
                    identity=self.elector.identity,
                )
            else:
                error = None if task.cancelled() else task.exception()
                self.log.error("task ended unexpectedly", task=task.get_name(), error=repr(error))
            self.failed = True
            self.stop()
        return False

    async def _drain(self) -> None:
        """Let the bindings in flight finish (up to bind_grace_seconds), unless the Lease is
        lost: then another instance may already be handing out the same cards, so they are
        cut short at once (their placements are undone, the new leader places the pods)."""
        lost = self.elector.lost if self.elector is not None else None
        if self.bindings:
            self.log.info("finishing bindings", in_flight=len(self.bindings))
            pending = set(self.bindings)
            grace = self.options.bind_grace_seconds
            if lost is not None and lost.is_set():
                grace = 0
            all_done = asyncio.ensure_future(asyncio.wait(pending))
            lost_wait = asyncio.ensure_future(lost.wait()) if lost is not None else None
            waiters: set[asyncio.Future[Any]] = {all_done, *([lost_wait] if lost_wait else [])}
            try:
                await asyncio.wait(waiters, timeout=grace, return_when=asyncio.FIRST_COMPLETED)
            finally:
                all_done.cancel()
                if lost_wait is not None:
                    lost_wait.cancel()
            late = {t for t in pending if not t.done()}
            for task in late:
                task.cancel()
            if late:
                # Let the cancelled cycles undo their placements before we report stopped.
                await asyncio.wait(late, timeout=5.0)
                self.log.warning(
                    "bindings cut short",
                    pods=len(late),
                    reason="leader lease lost" if lost is not None and lost.is_set() else "",
                    grace_seconds=self.options.bind_grace_seconds,
                )
        if self._side:
            await asyncio.wait(set(self._side), timeout=5.0)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._side.add(task)
        task.add_done_callback(self._side_done)

    def _side_done(self, task: asyncio.Task[None]) -> None:
        self._side.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.log.error(
                "background write failed", task=task.get_name(), error=repr(task.exception())
            )

    # -- watch handlers ---------------------------------------------------------------------

    def _on_node(self, kind: EventType, node: NodeModel) -> None:
        self.metrics.watch_events.labels("nodes").inc()
        name = node.name
        if kind is EventType.DELETED:
            self._nodes.pop(name, None)
            self.cache.remove_node(name)
            self.queue.move_all(ClusterEvent.NODE_DELETE)
            return
        old = self._nodes.get(name)
        if old == node:
            return  # a heartbeat: nothing the scheduler reads changed
        try:
            self.cache.upsert_node(node)
        except ValueError as exc:
            if old is not None:  # ignored means unused: not its previous row either
                self._nodes.pop(name, None)
                self.cache.remove_node(name)
                self.queue.move_all(ClusterEvent.NODE_DELETE)
            self._node_warning(node, f"node ignored: {exc}")
            return
        self._nodes[name] = node
        for warning in node.warnings:
            self._node_warning(node, warning)
        self.queue.move_all(ClusterEvent.NODE_ADD if old is None else ClusterEvent.NODE_UPDATE)

    def _node_warning(self, node: NodeModel, warning: str) -> None:
        if (node.name, warning) in self._warned:
            return
        self._warned.add((node.name, warning))
        self.log.warning("node data", node=node.name, warning=warning)
        self._spawn(
            self.writer.event(
                ObjectRef.node(node.name), "Warning", "GPUInventory", warning, action="ReadNode"
            ),
            f"event node {node.name}",
        )

    def _on_pod(self, kind: EventType, pod: PodInfo) -> None:
        self.metrics.watch_events.labels("pods").inc()
        uid = pod.uid
        if kind is EventType.DELETED:
            entry = self.cache.get(uid)
            self.cache.remove_pod(uid)
            self.queue.delete(uid)
            self.writer.forget(uid)
            for fw in self.frameworks.values():
                wp = fw.waiting.get(uid)
                if wp is not None:
                    wp.reject("", f"pod {pod.key} was deleted")
            if entry is not None and entry.alloc is not None:
                self.queue.move_all(ClusterEvent.ASSIGNED_POD_DELETE)
            return
        if pod.node_name:
            # Bound, by us or any other scheduler: its usage counts, it is not ours to place.
            self.queue.delete(uid)
            self.cache.add_or_update_pod(pod)
            return
        if pod.scheduler_name not in self.frameworks:
            return
        if pod.deleting:
            self.queue.delete(uid)
            return
        if self.cache.get(uid) is not None:
            # Assumed: its binding is in flight (this is e.g. our own PreBind patch) or
            # done and the watch has not shown the binding yet. The queue still learns the
            # new version if the pod is in flight: a failed binding requeues the latest
            # pod, as kube-scheduler's handleSchedulingFailure does.
            if uid in self.queue.inflight:
                self.queue.add(pod)
            return
        self.queue.add(pod)

    # -- scheduling -------------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            info = await self.queue.pop()
            if info is None:
                return
            self._attempt(info)
            self.metrics.pending.labels("active").set(len(self.queue.active))
            # Let the watches in between attempts, so the cache stays current in a burst.
            await asyncio.sleep(0)

    def _attempt(self, info: QueuedPodInfo) -> None:
        uid = info.pod.uid
        assumed_before = self.cache.get(uid) is not None
        binding_tasks = len(self.bindings)
        try:
            self._schedule_one(info)
        except Exception as exc:  # a bug must cost one attempt, not the daemon
            self.log.exception("scheduling attempt raised", pod=info.pod.key)
            if (
                not assumed_before
                and len(self.bindings) == binding_tasks
                and self.cache.is_assumed(uid)
            ):
                # It raised after assuming the pod (e.g. in Permit) and no binding cycle
                # owns the placement: drop it, or the capacity leaks (no TTL runs before
                # binding) and every later attempt sees an assumed pod and skips it.
                self.cache.forget(uid)
                for fw in self.frameworks.values():
                    fw.waiting.remove(uid)
            self.queue.requeue(info, unschedulable=False)
            self._report_failure(info.pod, f"scheduler error: {exc!r}", "SchedulerError")

    def _schedule_one(self, info: QueuedPodInfo) -> None:
        pod = info.pod
        cycle = self.cycles.get(pod.scheduler_name)
        if cycle is None or pod.deleting or self.cache.get(pod.uid) is not None:
            self.queue.done(pod.uid)
            return
        self.attempts += 1
        t0 = time.perf_counter()
        decision = cycle.schedule(pod, keep_scores=True)
        self._observe_plugins(pod.scheduler_name)
        if decision.result in (Result.SCHEDULED, Result.WAITING):
            task = asyncio.create_task(
                self._bind(info, cycle, decision, t0), name=f"bind {pod.key}"
            )
            self.bindings.add(task)
            task.add_done_callback(self.bindings.discard)
            return
        unschedulable = decision.result is Result.UNSCHEDULABLE
        rejected_by = {decision.status.plugin} if decision.status.plugin else set()
        self.queue.requeue(info, unschedulable=unschedulable, rejected_by=rejected_by)
        result = "unschedulable" if unschedulable else "error"
        message = decision.message if unschedulable else f"scheduler error: {decision.status}"
        self._finish(info, decision, result, message, t0)
        self._report_failure(pod, message, "Unschedulable" if unschedulable else "SchedulerError")

    async def _bind(
        self, info: QueuedPodInfo, cycle: SchedulingCycle, decision: Decision, t0: float
    ) -> None:
        pod = decision.pod
        tb = time.perf_counter_ns()
        try:
            st = await cycle.bind(decision)
        except asyncio.CancelledError:
            # Shutdown cut the binding short: undo the placement; the next daemon retries.
            if self.cache.is_assumed(pod.uid):
                cycle.unwind(decision)
            raise
        except Exception as exc:
            if self.cache.is_assumed(pod.uid):
                cycle.unwind(decision)
            st = Status(Code.ERROR, (f"binding cycle raised {exc!r}",), "", exc)
        bind_us = {"Binding": (time.perf_counter_ns() - tb) / 1e3}
        if st.is_success():
            self.bound += 1
            self.cache.set_deadline(pod.uid, self.clock() + self.config.assume_ttl_seconds)
            self.queue.done(pod.uid)
            self.metrics.bindings.labels("bound").inc()
            cards = decision.alloc.cards if decision.alloc else ()
            where = f"{decision.node}" + (f" (cards {','.join(map(str, cards))})" if cards else "")
            self._finish(info, decision, "bound", f"bound to {where}", t0, bind_us)
            self._spawn(
                self.writer.event(
                    ObjectRef.pod(pod),
                    "Normal",
                    "Scheduled",
                    f"Successfully assigned {pod.key} to {where}",
                    action="Binding",
                ),
                f"event {pod.key}",
            )
            return
        if final(st) or info.deleted:
            # Gone or already bound: nothing to retry, and no storm of 409s.
            self.queue.done(pod.uid)
            self.metrics.bindings.labels("dropped").inc()
            self._finish(info, decision, "dropped", st.message(), t0, bind_us)
            return
        self.metrics.bindings.labels("failed").inc()
        unschedulable = st.is_rejected()
        self.queue.requeue(
            info, unschedulable=unschedulable, rejected_by={st.plugin} if st.plugin else ()
        )
        message = st.message() or str(st)
        self._finish(
            info,
            decision,
            "unschedulable" if unschedulable else "bind_failed",
            message,
            t0,
            bind_us,
        )
        self._report_failure(
            pod,
            message if unschedulable else f"binding rejected: {message}",
            "Unschedulable" if unschedulable else "SchedulerError",
        )

    def _report_failure(self, pod: PodInfo, message: str, reason: str) -> None:
        async def write() -> None:
            await self.writer.event(ObjectRef.pod(pod), "Warning", "FailedScheduling", message)
            await self.writer.pod_condition(pod, reason, message)

        self._spawn(write(), f"report {pod.key}")

    def _finish(
        self,
        info: QueuedPodInfo,
        decision: Decision,
        result: str,
        message: str,
        t0: float,
        extra_us: dict[str, float] | None = None,
    ) -> None:
        profile = decision.pod.scheduler_name
        seconds = time.perf_counter() - t0
        metric_result = {"bound": "scheduled", "unschedulable": "unschedulable"}.get(
            result, "error"
        )
        self.metrics.attempts.labels(metric_result, profile).inc()
        self.metrics.attempt_duration.labels(metric_result, profile).observe(seconds)
        record = decision_record(
            decision,
            names=self.cache.snapshot.names,
            profile=profile,
            attempt=info.attempts,
            result=result,
            message=message,
            extra_us=extra_us,
        )
        if result in {"bound", "dropped"}:
            self.log.info("decision", **record)
        else:
            self.log.warning("decision", **record)

    def _observe_plugins(self, profile: str) -> None:
        """Per-plugin durations of the last attempt into the plugin histogram."""
        timings = self.frameworks[profile].timings
        prev_ns, prev_calls = self._timings.get(profile, ({}, {}))
        for key, ns in timings.ns.items():
            calls = timings.calls[key] - prev_calls.get(key, 0)
            if calls > 0:
                per_call = (ns - prev_ns.get(key, 0)) / calls / 1e9
                self.metrics.plugin_duration.labels(key[1], key[0], "Success").observe(per_call)
        self._timings[profile] = (dict(timings.ns), dict(timings.calls))

    # -- timers -----------------------------------------------------------------------------

    async def _timers(self) -> None:
        while True:
            await asyncio.sleep(TIMER_SECONDS)
            try:
                self._tick()
            except Exception:
                self.log.exception("timer tick raised")

    def _tick(self) -> None:
        self.queue.flush()
        for pod in self.cache.expire(self.clock()):
            # The binding reported success but the watch never showed it: trust the API.
            self.log.warning("assumed pod expired", pod=pod.key, uid=pod.uid)
            latest = self.pod_watch.get(pod.uid)
            if latest is not None and not latest.node_name and not latest.deleting:
                self.queue.add(latest)
            self.queue.move_all(ClusterEvent.ASSIGNED_POD_DELETE)
        for name, count in self.queue.pending().items():
            self.metrics.pending.labels(name).set(count)


def _node(raw: JSON, topo: TopologyKeys) -> NodeModel:
    return node_from_k8s(raw, topo)

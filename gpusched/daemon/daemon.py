"""The scheduler daemon: the lifecycle around the shared scheduling loop.

    nodes watch ──▶ core/events.py: cache.upsert_node / remove_node, queue.move_all
    pods watch ──┬▶ bound or terminal: cache (confirms assumed pods)
                 ├▶ unbound, our schedulerName: queue.add
                 └▶ deleted: cache, queue, pods waiting at Permit
    loop: pop ─▶ ScheduleOne.attempt (core/schedule_one.py, no await)
                   └▶ SCHEDULED/WAITING: a task runs ScheduleOne.bind (daemon/tasks.py)
          every ending ─▶ daemon/reporting.py: decision record, Events, condition, metrics
    timers: backoff flush, unschedulable flush (assumed pods never expire: core/schedule_one.py)
    leader election (gpusched/kube/lease.py): watches, cache and queue run from the start;
    the loop starts once this instance holds the Lease (one lease duration later if it took
    the Lease over from a holder that never released it), with its learners warm-started
    from the bound pods; every PreBind and Bind first checks the Lease is freshly renewed;
    losing it stops the daemon (exit 1)
    device-plugin over-commit (core/overcommit.py): pod and node events mark nodes; each
    tick recomputes the marked ones, and a node whose excess changes gets a log line, the
    gauges, and (from the leader) a GPUOvercommitted Warning Event on the Node
    gangs (only when a profile enables GangScheduling): PodGroup watches of both APIs
    (kube/podgroups.py) feed Handle.gangs and ClusterEvents.pod_group_changed; member and
    attempt changes go to a GangBoard (daemon/gang_status.py), which the PodGroup status
    operator (operator/operator.py, a kopf thread) writes while this instance leads
    tenants and quotas (always): the ElasticQuota watch and the Namespace labels
    (kube/quotas.py) are Handle.tenancy; quota changes requeue the pods ElasticQuota
    refused; each quota's usage goes to a QuotaBoard (daemon/quota_status.py), written as
    status.used by the same operator while this instance leads

The simulator drives the same ScheduleOne and event handlers; only this file's watches,
tasks and signals are the daemon's own. Everything that touches the cache runs on the one
event loop without awaiting in between, which is the atomicity kube-scheduler gets from its
cache lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from gpusched.config import SchedulerConfig
from gpusched.config.settings import Watch
from gpusched.core.cache.cache import ClusterCache
from gpusched.core.cache.snapshot import Snapshot
from gpusched.core.events import ClusterEvents
from gpusched.core.handle import SchedulerHandle
from gpusched.core.overcommit import Change, OvercommitTracker
from gpusched.core.queue import ClusterEvent, QueuedPodInfo, SchedulingQueue
from gpusched.core.queue.hints import VOLUME_PLUGINS
from gpusched.core.runtime.framework import Framework, pre_enqueue_of
from gpusched.core.schedule_one import Result, ScheduleOne
from gpusched.daemon.gang_status import GangStatusPublisher
from gpusched.daemon.liveness import Liveness
from gpusched.daemon.quota_status import QuotaStatusPublisher
from gpusched.daemon.reload import DEFAULT_POLL_SECONDS, ConfigReload
from gpusched.daemon.reporting import Reporter
from gpusched.daemon.tasks import Tasks
from gpusched.daemon.telemetry import TelemetryTask
from gpusched.daemon.warmup import warm_kernels
from gpusched.framework.disruption import NO_DISRUPTION
from gpusched.framework.dra import NO_DRA, DraChange
from gpusched.framework.gangs import NO_GANGS
from gpusched.framework.registry import Registry
from gpusched.framework.status import Status
from gpusched.framework.volumes import NO_VOLUMES
from gpusched.kube import faults
from gpusched.kube.client import JSON, ApiError, Kube
from gpusched.kube.disruption import KubeDisruption
from gpusched.kube.dra import KubeDra
from gpusched.kube.lease import KubeLeases, LeaderElector, default_identity
from gpusched.kube.ops import pod_path
from gpusched.kube.podgroups import KubePodGroups
from gpusched.kube.quotas import KubeQuotas
from gpusched.kube.volumes import CLAIMS, CLASSES, CSI_NODES, VOLUMES, KubeVolumes
from gpusched.kube.watch import Backoff, EventType, Reflector
from gpusched.kube.writer import ClusterWriter, ObjectRef
from gpusched.model import keys
from gpusched.model.namespace import NamespaceInfo, namespace_from_k8s
from gpusched.model.node import NodeModel, TopologyKeys, node_from_k8s
from gpusched.model.pod import GangAPI, GpuKind, PodInfo, pod_from_k8s
from gpusched.observability.metrics import Metrics
from gpusched.operator.board import GangBoard
from gpusched.operator.quota_board import QuotaBoard

if TYPE_CHECKING:
    from gpusched.operator.operator import StatusOperator

Logger = structlog.typing.FilteringBoundLogger

# kube-scheduler's informer skips finished pods: they hold nothing and would only grow the
# cache. A pod that finishes is seen as a deletion.
ACTIVE_PODS = ("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed")
TIMER_SECONDS = 1.0  # backoff and unschedulable flushes, kube's 1 s ticker
# Pod warnings remembered for deduplication (the oldest forgotten first): a tenant editing
# annotations in a loop must not grow the daemon's memory.
MAX_POD_WARNINGS = 1024
MAX_WARNED = 4096  # node warnings remembered as reported (and kept for a standby to write)
# The gang plugin's name: a profile enabling it makes the daemon watch PodGroups and keep
# their status (named here, not imported: the daemon does not depend on one plugin).
DRA_PLUGIN = "DynamicResources"
# How long a stopping leader waits for the status operator's thread before it releases
# the Lease (its writes are already fenced; a standby should not wait on kopf's shutdown).
OPERATOR_STOP_WAIT = 1.0
GANG_PLUGIN = "GangScheduling"
# The preemption plugin's name: a profile enabling it makes the daemon watch
# PodDisruptionBudgets (kube/disruption.py), as kube-scheduler's DefaultPreemption does.
PREEMPTION_PLUGIN = "Preemption"


@dataclass(frozen=True)
class DaemonOptions:
    bind_grace_seconds: float = 30.0  # SIGTERM: how long in-flight bindings may finish
    instance: str = ""  # reportingInstance of our Events (the pod name in a cluster)
    identity: str = ""  # holder identity in the leader Lease; default: pod name + random suffix
    warm_up: bool = True  # compile the kernels before seeking the Lease (daemon/warmup.py)
    # Watch PodGroups and write their status; None: when a profile enables GANG_PLUGIN.
    pod_groups: bool | None = None
    # Configuration hot reload (daemon/reload.py): the --config file watched ("": none),
    # the hash of the bytes `config` was loaded from, the poll interval (0: off), the
    # ConfigMap ("namespace/name") or else this Pod's namespace (with `instance`, its
    # name) that a refused file's Event regards, and the --leader-elect flag a new file
    # gets as the first one did.
    config_file: str = ""
    config_digest: str = ""
    config_poll_seconds: float = DEFAULT_POLL_SECONDS
    config_map: str = ""
    pod_namespace: str = ""
    leader_elect: bool | None = None


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
        # Claims, volumes, classes and CSINodes are watched only when a profile has a volume
        # plugin (kube-scheduler's informers start only for the plugins that ask for them).
        self.volumes: KubeVolumes | None = None
        if any(VOLUME_PLUGINS.intersection(p.names()) for p in config.profiles):
            self.volumes = KubeVolumes(
                kube,
                on_change=self._on_storage,
                backoff=lambda: _backoff(config.watch),
                watch_timeout=config.watch.timeout_seconds,
                read_timeout=config.watch.read_timeout_seconds,
            )
        # DeviceClasses, ResourceSlices and ResourceClaims: only when a profile allocates
        # claims (the same rule); on a cluster that does not serve resource.k8s.io/v1 the
        # watches idle.
        self.dra: KubeDra | None = None
        if any(DRA_PLUGIN in p.names() for p in config.profiles):
            self.dra = KubeDra(
                kube,
                on_change=self._on_dra,
                backoff=lambda: _backoff(config.watch),
                watch_timeout=config.watch.timeout_seconds,
                read_timeout=config.watch.read_timeout_seconds,
            )
        # PodGroups of both APIs are watched only when gangs are scheduled (the same rule).
        gangs = self.options.pod_groups
        if gangs is None:
            gangs = any(GANG_PLUGIN in p.names() for p in config.profiles)
        self.pod_groups: KubePodGroups | None = None
        if gangs:
            self.pod_groups = KubePodGroups(
                kube,
                on_change=self._on_pod_group,
                backoff=lambda: _backoff(config.watch),
                watch_timeout=config.watch.timeout_seconds,
                read_timeout=config.watch.read_timeout_seconds,
            )
        # Tenants and their ElasticQuotas (kube/quotas.py), always: admission, reclaim and
        # the fair order all read tenancy; without the CRD the watch idles (no quotas).
        self.quotas = KubeQuotas(
            kube,
            on_change=self._on_quota,
            backoff=lambda: _backoff(config.watch),
            watch_timeout=config.watch.timeout_seconds,
            read_timeout=config.watch.read_timeout_seconds,
        )
        # PodDisruptionBudgets and preemption's writes: when a profile preempts. Its writes
        # are fenced by the leader Lease as Bind is (self._fence reads the elector made
        # below, at call time).
        self.disruption: KubeDisruption | None = None
        if any(PREEMPTION_PLUGIN in p.names() for p in config.profiles):
            self.disruption = KubeDisruption(
                kube,
                self.writer,
                fence=self._fence,
                on_change=lambda: self.metrics.watch_events.labels("poddisruptionbudgets").inc(),
                backoff=lambda: _backoff(config.watch),
                watch_timeout=config.watch.timeout_seconds,
                read_timeout=config.watch.read_timeout_seconds,
            )
        self.handle = SchedulerHandle(
            self.cache,
            self.writer,
            clock,
            volumes=self.volumes or NO_VOLUMES,
            gangs=self.pod_groups or NO_GANGS,
            dra=self.dra or NO_DRA,
            tenancy=self.quotas,
            disruption=self.disruption or NO_DISRUPTION,
            wall=time.time,
        )
        # What the PodGroup status operator writes (only the leader runs it).
        self.gang_board: GangBoard | None = None
        self.gang_status: GangStatusPublisher | None = None
        self.status_operator: StatusOperator | None = None
        if gangs:
            self.gang_board = GangBoard()
            self.gang_status = GangStatusPublisher(self.gang_board, self.handle)
        # ElasticQuota status.used and its Warning Events (the same operator writes them).
        self.quota_board = QuotaBoard()
        self.quota_status = QuotaStatusPublisher(self.quota_board, self.quotas, self.handle)
        self.cache.usage_changed = self.quota_status.namespace_used
        # One framework per profile; a pod goes to the one named by its schedulerName.
        self.frameworks: dict[str, Framework] = {
            p.scheduler_name: Framework(
                p, registry, self.handle, seed=config.tie_break_seed, waiting=self.handle.waiting
            )
            for p in config.profiles
        }
        first = next(iter(self.frameworks.values()))
        # The loader insists every profile uses the same QueueSort, so one queue orders all.
        self.queue = SchedulingQueue(
            first.less,
            clock,
            initial_backoff=config.pod_initial_backoff_seconds,
            max_backoff=config.pod_max_backoff_seconds,
            max_unschedulable=config.pod_max_in_unschedulable_pods_duration_seconds,
            pre_enqueue=pre_enqueue_of(self.frameworks),
            on_gated=self._on_gated,
            fair=first.fair,
        )
        self.queue.tenant_of = self.quotas.tenant_of
        queue = self.queue
        self.handle.pending = lambda uid: bool(queue.where(uid))
        topo: TopologyKeys = config.topology_keys
        self.node_watch: Reflector[NodeModel] = Reflector(
            kube,
            "/api/v1/nodes",
            lambda raw: _node(raw, topo),
            self._on_node,
            name="nodes",
            watch_timeout=config.watch.timeout_seconds,
            read_timeout=config.watch.read_timeout_seconds,
            backoff=_backoff(config.watch),
        )
        self.pod_watch: Reflector[PodInfo] = Reflector(
            kube,
            "/api/v1/pods",
            pod_from_k8s,
            self._on_pod,
            name="pods",
            query=[ACTIVE_PODS],
            watch_timeout=config.watch.timeout_seconds,
            read_timeout=config.watch.read_timeout_seconds,
            backoff=_backoff(config.watch),
        )
        # Namespace labels, for pod (anti-)affinity terms' namespaceSelector.
        self.namespace_watch: Reflector[NamespaceInfo] = Reflector(
            kube,
            "/api/v1/namespaces",
            namespace_from_k8s,
            self._on_namespace,
            name="namespaces",
            watch_timeout=config.watch.timeout_seconds,
            read_timeout=config.watch.read_timeout_seconds,
            backoff=_backoff(config.watch),
        )
        # /healthz: the watches progress and the loop is not wedged (daemon/liveness.py).
        self.liveness = Liveness(
            [
                self.node_watch,
                self.pod_watch,
                self.namespace_watch,
                *(self.volumes.reflectors if self.volumes else ()),
                *(self.pod_groups.reflectors if self.pod_groups else ()),
                *(self.dra.reflectors if self.dra else ()),
                *self.quotas.reflectors,
                *(self.disruption.reflectors if self.disruption else ()),
            ],
            lambda: len(self.queue.active),
            watch_stall=config.liveness.watch_stall_seconds,
            loop_stall=config.liveness.loop_stall_seconds,
            clock=clock,
        )
        # Node warnings already reported, least recently seen first: bounded, since a
        # warning's text carries node data (a malformed value) that may change every update.
        self._warned: OrderedDict[tuple[str, str], None] = OrderedDict()
        # Node warnings a standby saw: written as Events once it leads (only the leader
        # writes to the API, as kube-scheduler's standbys write nothing).
        self._unwritten: deque[tuple[str, str]] = deque(maxlen=MAX_WARNED)
        # (pod uid, message) -> the pod while its Warning Event is unwritten (a standby's),
        # None once written.
        self._pod_warned: OrderedDict[tuple[str, str], PodInfo | None] = OrderedDict()
        # Nodes whose device-plugin GPUs gpusched's shared pods over-commit, and those whose
        # Warning Event a standby has not written (the leader writes it once it leads).
        self.overcommit = OvercommitTracker(lambda pod: pod.scheduler_name in self.frameworks)
        self._overcommit_unwritten: set[str] = set()
        self.tasks = Tasks(logger)
        self.events = ClusterEvents(
            self.cache,
            self.queue,
            [self.handle.waiting],
            self.frameworks,
            on_pod_warning=self._pod_warning,
            gangs=self.handle.gang_index,
            dra=self.dra or NO_DRA,
        )
        # Live GPU telemetry from Prometheus (daemon/telemetry.py), when configured.
        self.telemetry: TelemetryTask | None = None
        if config.telemetry.prometheus_url:
            self.telemetry = TelemetryTask(
                config.telemetry,
                self.cache.snapshot,
                self.queue,
                self.metrics,
                logger,
                node_event=self._telemetry_event,
                leading=self.leading_now,
                on_applied=self._telemetry_applied,
            )
        self.schedule_one = ScheduleOne(
            self.frameworks,
            self.cache,
            self.queue,
            clock=clock,
            observer=Reporter(
                logger,
                self.metrics,
                self.writer,
                self.tasks,
                self.frameworks,
                lambda: self.cache.snapshot.names,
                on_attempt=self.gang_status.attempted if self.gang_status else None,
                telemetry=self.telemetry.taken if self.telemetry else None,
            ),
            keep_scores=True,
            read_pod=self._read_pod,
            dra=self.dra or NO_DRA,
        )
        self.ready = asyncio.Event()
        self.leading = asyncio.Event()  # the scheduling loop runs (we hold the Lease)
        # The kernels are compiled (or the warm-up is off): from here on seeking the Lease
        # takes seconds, not the minute a cold 2-core machine compiles for.
        self.warmed = asyncio.Event()
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
            self.schedule_one.fence = self._fence
            self.writer.fence = self._fence
        self.failed = False  # a core task died: `gpusched run` exits 1
        self.reload: ConfigReload | None = None
        self.metrics.config_generation.set(1)  # without a watched file it stays the first
        if self.options.config_file and self.options.config_poll_seconds > 0:
            self.reload = ConfigReload(
                self,
                self.options.config_file,
                initial_digest=self.options.config_digest,
                interval=self.options.config_poll_seconds,
                config_map=self.options.config_map,
                pod_namespace=self.options.pod_namespace,
                leader_elect=self.options.leader_elect,
                unwatched=self._unwatched_plugins(),
            )

    def _unwatched_plugins(self) -> set[str]:
        """Plugins whose watches this daemon did not start: a reload may not enable one."""
        out: set[str] = set()
        if self.volumes is None:
            out |= VOLUME_PLUGINS
        if self.dra is None:
            out.add(DRA_PLUGIN)
        if self.pod_groups is None:
            out.add(GANG_PLUGIN)
        if self.disruption is None:
            out.add(PREEMPTION_PLUGIN)
        return out

    # -- lifecycle --------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop taking pods; `run` finishes the bindings in flight, releases the leader Lease
        and returns."""
        self._stop.set()

    @property
    def bound(self) -> int:
        return self.schedule_one.bound

    @property
    def attempts(self) -> int:
        return self.schedule_one.attempts

    @property
    def bindings(self) -> set[asyncio.Task[Any]]:
        return self.tasks.bindings

    @property
    def is_ready(self) -> bool:
        return self.ready.is_set()

    async def run(self) -> None:
        background = [
            asyncio.create_task(self.node_watch.run(), name="watch nodes"),
            asyncio.create_task(self.pod_watch.run(), name="watch pods"),
            asyncio.create_task(self.namespace_watch.run(), name="watch namespaces"),
        ]
        for reflector in self.volumes.reflectors if self.volumes else ():
            background.append(asyncio.create_task(reflector.run(), name=f"watch {reflector.name}"))
        if self.pod_groups is not None:
            background.append(asyncio.create_task(self.pod_groups.run(), name="watch podgroups"))
        if self.dra is not None:
            background.append(asyncio.create_task(self.dra.run(), name="watch dra"))
        background.append(asyncio.create_task(self.quotas.run(), name="watch elasticquotas"))
        if self.reload is not None:
            # Standbys reload too: the moment one leads it schedules with the current file.
            background.append(asyncio.create_task(self.reload.run(), name="config reload"))
        if self.disruption is not None:
            background.append(
                asyncio.create_task(self.disruption.run(), name="watch poddisruptionbudgets")
            )
        loop_task: asyncio.Task[None] | None = None
        elector_task: asyncio.Task[None] | None = None
        try:
            # Nodes first, so the pods of the first list find their rows; both before the
            # first attempt, so a restarted scheduler sees every card in use before it
            # hands one out (kube-scheduler's WaitForCacheSync).
            synced = asyncio.gather(
                self.node_watch.synced.wait(),
                self.pod_watch.synced.wait(),
                *([self.volumes.wait_synced()] if self.volumes else []),
                *([self.pod_groups.wait_synced()] if self.pod_groups else []),
                # Every allocated claim known before the first attempt: a device is never
                # handed out twice across a restart.
                *([self.dra.wait_synced()] if self.dra else []),
                # Every tenant's quota known before the first attempt: a restart must not
                # admit past a max it has not read yet.
                self.quotas.wait_synced(),
                # Every budget known before the first preemption: none evicts past one.
                *([self.disruption.wait_synced()] if self.disruption else []),
                self.namespace_watch.synced.wait(),
            )
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
                nodes=len(self.events.nodes),
                pods=len(self.cache.pods),
                queued=len(self.queue),
                profiles=list(self.frameworks),
                # What each Score plugin's raw score in the decision records means (the
                # records carry only the unit).
                score_units={n: fw.score_units for n, fw in self.frameworks.items()},
            )
            self.ready.set()
            background.append(asyncio.create_task(self._timers(), name="timers"))
            if self.telemetry is not None:
                # Standbys too: the snapshot a new leader schedules from is current.
                background.append(asyncio.create_task(self.telemetry.run(), name="telemetry"))
            if self.elector is not None:
                # A warm standby: watches, cache and queue stay current, so the moment we
                # lead, the first attempt sees the cluster as it is. Seeking the Lease only
                # after the sync (as kube-scheduler does) keeps an instance that cannot
                # list the cluster from holding it.
                if self.options.warm_up and not await self._warm_up():
                    return
                self.warmed.set()
                elector_task = asyncio.create_task(self.elector.run(), name="leader election")
                if not await self._until(self.elector.leading, {elector_task, *background}):
                    return
                if not await self._after_takeover({elector_task, *background}):
                    return
            else:
                self.warmed.set()
                self.metrics.leader.set(1)
                self.log.info("leader election disabled: scheduling without a lease")
            self.leading.set()
            self._start_status_operator()
            self._warm_start()
            for name, warning in self._unwritten:
                self._write_node_warning(name, warning)
            self._unwritten.clear()
            if self.telemetry is not None:
                self.telemetry.now_leading()
            for name in sorted(self._overcommit_unwritten):
                use = self.overcommit.over.get(name)
                if use is not None:
                    self._write_overcommit(name, "Warning", OVERCOMMITTED, use.describe())
            self._overcommit_unwritten.clear()
            if self.reload is not None:
                self.reload.took_lead()
            for gated in list(self.queue.gated.values()):
                fw = self.frameworks.get(gated.pod.scheduler_name)
                if fw is not None:
                    self._write_gated(gated.pod, fw.run_pre_enqueue(gated.pod))
            for key, unwritten in list(self._pod_warned.items()):
                if unwritten is not None and self.cache.get(key[0]) is not None:
                    self._write_pod_warning(unwritten, key[1])
                self._pod_warned[key] = None
            loop_task = asyncio.create_task(self._loop(), name="scheduling loop")
            core = {loop_task, *background, *([elector_task] if elector_task else [])}
            await self._until(None, core)
        finally:
            # First, at once: no new pod is taken (a stop or a lost Lease).
            self.queue.close()
            if self.status_operator is not None:
                # Then: a replica that lost the Lease must stop writing status now (no
                # write starts after this; kopf may finish stopping in its own thread
                # while the Lease goes to the next leader).
                await self.status_operator.stop(OPERATOR_STOP_WAIT)
            if loop_task is not None:
                # A loop that died has been reported by _until; the cleanup below must run.
                await asyncio.gather(loop_task, return_exceptions=True)
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

    async def _after_takeover(self, core: set[asyncio.Task[None]]) -> bool:
        """After taking over a Lease its holder never released, wait one lease duration
        before the first binding: the old leader stops writing at its renew deadline, but a
        request it sent just before may still reach the API server. False if stopped."""
        assert self.elector is not None
        previous = self.elector.took_over_from
        if not previous:
            return True
        wait = float(self.elector.lease_duration)
        self.log.info(
            "took over the leader Lease; waiting before the first binding",
            previous_holder=previous,
            seconds=wait,
        )
        elapsed = asyncio.Event()
        pause = asyncio.create_task(self.elector.hold_off(), name="takeover wait")
        pause.add_done_callback(lambda _: elapsed.set())
        try:
            return await self._until(elapsed, core)
        finally:
            pause.cancel()

    def _start_status_operator(self) -> None:
        """The PodGroup and ElasticQuota status operator, while we lead (kopf in a thread
        of its own)."""
        quota_board = self.quota_board if self.quotas.served else None
        if self.status_operator is not None or (self.gang_board is None and not self.quotas.specs):
            # Nothing to keep yet: the first ElasticQuota starts it (_on_quota).
            return
        # kopf costs ~0.8 s to import: only a daemon that keeps some status pays it.
        from gpusched.operator.operator import StatusOperator  # noqa: PLC0415 - see above

        cc = self.config.client_connection
        self.status_operator = StatusOperator(
            self.gang_board,
            self.kube.api_client.configuration,
            instance=self.options.instance,
            qps=cc.qps,
            burst=cc.burst,
            quota_board=quota_board,
        )
        self.status_operator.start()
        self.log.info(
            "status operator started",
            podgroups=self.gang_board is not None,
            elasticquotas=quota_board is not None,
        )

    def leading_now(self) -> bool:
        return self.leading.is_set()

    def _telemetry_event(self, node: str, type_: str, reason: str, message: str) -> None:
        """A card health Event on a Node (daemon/telemetry.py calls it only while leading)."""
        self.tasks.spawn(
            self.writer.event(ObjectRef.node(node), type_, reason, message, action="ReadTelemetry"),
            f"event node {node}",
        )

    def _telemetry_applied(self) -> None:
        """After each telemetry pass: plugins that keep state over the readings (Thermal's
        red-line latch) bring it up to date, before the next attempt."""
        for fw in self.frameworks.values():
            fw.telemetry_updated()

    def _fence(self) -> str | None:
        return self.elector.fence() if self.elector is not None else None

    def _warm_start(self) -> None:
        """Each profile's learners start from the pods it already placed (any instance's),
        not empty: a failover must not forget the workload's shapes."""
        bound: dict[str, list[PodInfo]] = {name: [] for name in self.frameworks}
        for entry in self.cache.allocations():
            if not entry.assumed and entry.pod.scheduler_name in bound:
                bound[entry.pod.scheduler_name].append(entry.pod)
        for name, fw in self.frameworks.items():
            fw.warm_start(bound[name])
        self.log.info("learners warm-started", pods={k: len(v) for k, v in bound.items()})

    async def _read_pod(self, pod: PodInfo) -> PodInfo | None:
        """The pod as the API has it now (None: gone); settles a binding of unknown
        outcome. Raises on an API or network error: the caller keeps holding the cards."""
        try:
            raw = await self.kube.get(pod_path(pod.namespace, pod.name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return pod_from_k8s(raw)

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
        lost = self.elector.lost if self.elector is not None else None
        await self.tasks.drain(self.options.bind_grace_seconds, lost)

    # -- watch handlers ---------------------------------------------------------------------

    def _on_node(self, kind: EventType, node: NodeModel) -> None:
        self.metrics.watch_events.labels("nodes").inc()
        if kind is EventType.DELETED:
            self.events.node_deleted(node.name)
            self.quota_status.touch_all()  # the cluster's capacity shrank
            gone = self.overcommit.forget(node.name)
            if gone is not None:
                self._report_overcommit(gone)
            return
        old = self.events.nodes.get(node.name)
        if old is None or _capacity_of(old) != _capacity_of(node):
            # What the quota capacity counts (mins above it are scaled down).
            self.quota_status.touch_all()
        if old is None or old.allocatable_gpus != node.allocatable_gpus:
            # Only what the over-commit count reads: status heartbeats mark nothing.
            self.overcommit.mark(node.name)
        try:
            self.events.node_changed(node)
        except ValueError as exc:
            self.overcommit.mark(node.name)  # ignored now: an over-commit there resolves
            self._node_warning(node, f"node ignored: {exc}")
            return
        for warning in node.warnings:
            self._node_warning(node, warning)

    def _node_warning(self, node: NodeModel, warning: str) -> None:
        key = (node.name, warning)
        if key in self._warned:
            self._warned.move_to_end(key)
            return
        self._warned[key] = None
        if len(self._warned) > MAX_WARNED:
            self._warned.popitem(last=False)
        self.log.warning("node data", node=node.name, warning=warning)
        if self.leading.is_set():
            self._write_node_warning(node.name, warning)
        else:
            self._unwritten.append((node.name, warning))

    def _write_node_warning(self, name: str, warning: str) -> None:
        self.tasks.spawn(
            self.writer.event(
                ObjectRef.node(name), "Warning", "GPUInventory", warning, action="ReadNode"
            ),
            f"event node {name}",
        )

    def _pod_warning(self, pod: PodInfo, message: str) -> None:
        """A pod charged conservatively (core/cache/cache.py): logged, and a Warning Event on
        the pod, once per pod and message; a standby writes it once it leads."""
        key = (pod.uid, message)
        if key in self._pod_warned:
            self._pod_warned.move_to_end(key)
            return
        self._pod_warned[key] = pod
        while len(self._pod_warned) > MAX_POD_WARNINGS:
            self._pod_warned.popitem(last=False)
        self.log.warning("pod GPU assignment", pod=pod.key, uid=pod.uid, warning=message)
        if self.leading.is_set():
            self._pod_warned[key] = None
            self._write_pod_warning(pod, message)

    def _write_pod_warning(self, pod: PodInfo, message: str) -> None:
        self.tasks.spawn(
            self.writer.event(
                ObjectRef.pod(pod), "Warning", "GPUAssignmentInvalid", message, action="ReadPod"
            ),
            f"event {pod.key}",
        )

    def _on_gated(self, pod: PodInfo, status: Status) -> None:
        """The queue keeps a pod out of activeQ (a PreEnqueue plugin refused it)."""
        self.log.info(
            "decision",
            pod=pod.key,
            uid=pod.uid,
            profile=pod.scheduler_name,
            result="gated",
            plugin=status.plugin,
            message=status.message(),
            config_generation=fw.generation
            if (fw := self.frameworks.get(pod.scheduler_name))
            else None,
        )
        if self.leading.is_set():
            self._write_gated(pod, status)

    def _write_gated(self, pod: PodInfo, status: Status) -> None:
        """The pod's PodScheduled condition while a PreEnqueue plugin holds it; only the
        leader writes. Scheduling gates: what the apiserver writes on a pod created with
        gates. Any other plugin (a gang waiting for its members or its PodGroup): reason
        NotReadyForScheduling with the plugin's message (KEP-5501's reason for PreEnqueue
        rejections), so `kubectl describe` says why the pod is not even attempted."""
        if status.is_success():
            return
        if status.plugin == "SchedulingGates":
            reason, message = SCHEDULING_GATED, SCHEDULING_GATED_MESSAGE
        else:
            reason, message = NOT_READY_FOR_SCHEDULING, status.message()
        self.tasks.spawn(self.writer.pod_condition(pod, reason, message), f"report {pod.key}")

    def _on_storage(self, kind: str) -> None:
        """A claim, volume, class or CSINode added or updated: wake the pods a volume plugin
        rejected (core/queue/hints.py)."""
        self.metrics.watch_events.labels(kind).inc()
        self.queue.move_all(_STORAGE_EVENTS[kind])

    def _on_namespace(self, kind: EventType, ns: NamespaceInfo) -> None:
        self.metrics.watch_events.labels("namespaces").inc()
        if kind is EventType.DELETED:
            self.cache.remove_namespace(ns.name)
            self.quotas.remove_namespace(ns.name)
        else:
            self.cache.set_namespace(ns.name, ns.labels)
            self.quotas.set_namespace(ns.name, ns.labels)

    def _on_quota(self) -> None:
        """An ElasticQuota changed, or a Namespace moved to another tenant (kube/quotas.py):
        the pods ElasticQuota refused are judged again."""
        self.queue.move_all(ClusterEvent.QUOTA_CHANGE)
        self.quota_status.touch_all()
        if self.leading.is_set() and self.status_operator is None and self.quotas.specs:
            self._start_status_operator()  # the first ElasticQuota of a gang-less daemon

    def _on_pod(self, kind: EventType, pod: PodInfo) -> None:
        self.metrics.watch_events.labels("pods").inc()
        # Read before the update: the cache updates its entry in place.
        before = self.cache.get(pod.uid)
        had_gpu = before is not None and before.pod.request.kind is not GpuKind.NONE
        if kind is EventType.DELETED:
            self.writer.forget(pod.uid)
            self.events.pod_deleted(pod)
        else:
            self.events.pod_changed(pod)
        if pod.node_name and (had_gpu or pod.request.kind is not GpuKind.NONE):
            # A GPU pod (or one that was) on the node: the over-commit count may change;
            # CPU pods' churn marks nothing.
            self.overcommit.mark(pod.node_name)
        if self.gang_status is not None and pod.gang is not None:
            self.gang_status.touch(pod.gang.api, pod.gang.name)

    def _on_dra(self, change: DraChange) -> None:
        """A DeviceClass, ResourceSlice or ResourceClaim changed (kube/dra.py)."""
        self.metrics.watch_events.labels(change.kind).inc()
        self.events.dra_changed(change)

    def _on_pod_group(self, api: GangAPI, key: str, deleted: bool) -> None:
        """A PodGroup of either API added, updated or deleted (kube/podgroups.py)."""
        self.metrics.watch_events.labels("podgroups").inc()
        self.events.pod_group_changed(api, key, deleted=deleted)
        if self.gang_status is not None:
            if deleted:
                self.gang_status.forget(api, key)
            else:
                self.gang_status.touch(api, key)

    # -- scheduling -------------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            self.liveness.loop_waiting()
            info = await self.queue.pop()
            if info is None:
                self.liveness.loop_stopped()
                return
            self.liveness.loop_beat()
            self._attempt(info)
            self.metrics.pending.labels("active").set(len(self.queue.active))
            # Let the watches in between attempts, so the cache stays current in a burst.
            await asyncio.sleep(0)

    def _attempt(self, info: QueuedPodInfo) -> None:
        """The loop's body: the scheduling cycle, then a task for the binding cycle."""
        decision = self.schedule_one.attempt(info)
        if self.telemetry is not None and decision is not None and decision.node:
            self.telemetry.note(info.pod.uid, decision.node)
        gang = info.pod.gang
        if self.gang_status is not None and gang is not None:
            self.gang_status.touch(gang.api, gang.name)  # assumed or waiting: placed now
        if decision is not None and decision.result in (Result.SCHEDULED, Result.WAITING):
            faults.reached(faults.AFTER_ASSUME)
            self.tasks.bind(self.schedule_one.bind(info, decision), f"bind {info.pod.key}")

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
        for name, count in self.queue.pending().items():
            self.metrics.pending.labels(name).set(count)
        self._check_overcommit()

    # -- device-plugin over-commit -----------------------------------------------------------

    def _check_overcommit(self) -> None:
        """Recompute the nodes marked since the last tick: a burst of pod events on a node
        is one look, and only a change of its excess is reported."""
        nodes = self.events.nodes
        for change in self.overcommit.evaluate(
            self.cache, lambda name: n.allocatable_gpus if (n := nodes.get(name)) else -1
        ):
            self._report_overcommit(change)

    def _report_overcommit(self, change: Change) -> None:
        name = change.node
        self.metrics.overcommitted_nodes.set(len(self.overcommit.over))
        if change.resolved:
            # Set when the node became over-committed; a node's series must not outlive it.
            with contextlib.suppress(KeyError):
                self.metrics.overcommitted_cards.remove(name)
            message = (
                change.now.describe_resolved()
                if change.now is not None
                else "GPU over-commit resolved: the node is gone or no longer advertises"
                f" {keys.GPU_RESOURCE}"
            )
            self.log.info("GPU over-commit resolved", node=name, message=message)
            if name in self._overcommit_unwritten:
                self._overcommit_unwritten.discard(name)  # its Warning was never written
            elif self.leading.is_set() and change.now is not None:
                self._write_overcommit(name, "Normal", OVERCOMMIT_RESOLVED, message)
            return
        use = change.now
        assert use is not None  # not resolved
        self.metrics.overcommitted_cards.labels(name).set(use.excess)
        message = use.describe()
        self.log.warning(
            "GPU over-commit",
            node=name,
            cards=use.cards,
            in_use=use.used,
            excess=use.excess,
            other_schedulers=[p.key for p in use.their_pods],
            message=message,
        )
        if self.leading.is_set():
            self._write_overcommit(name, "Warning", OVERCOMMITTED, message)
        else:
            self._overcommit_unwritten.add(name)

    def _write_overcommit(self, name: str, type_: str, reason: str, message: str) -> None:
        self.tasks.spawn(
            self.writer.event(ObjectRef.node(name), type_, reason, message, action="CheckGPUUse"),
            f"event node {name}",
        )


# kube's PodScheduled condition for a gated pod (pkg/registry/core/pod/strategy.go).
SCHEDULING_GATED = "SchedulingGated"
SCHEDULING_GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"
NOT_READY_FOR_SCHEDULING = "NotReadyForScheduling"
# The device-plugin over-commit Events on a Node (core/overcommit.py).
OVERCOMMITTED = "GPUOvercommitted"
OVERCOMMIT_RESOLVED = "GPUOvercommitResolved"


_STORAGE_EVENTS = {
    CLAIMS: ClusterEvent.PVC_CHANGE,
    VOLUMES: ClusterEvent.PV_CHANGE,
    CLASSES: ClusterEvent.STORAGE_CLASS_CHANGE,
    CSI_NODES: ClusterEvent.CSI_NODE_CHANGE,
}


def _capacity_of(node: NodeModel) -> tuple[object, ...]:
    return (node.cards, node.cpu_milli, node.memory_bytes, node.pods)


def _node(raw: JSON, topo: TopologyKeys) -> NodeModel:
    return node_from_k8s(raw, topo)


def _backoff(watch: Watch) -> Backoff:
    return Backoff(
        initial=watch.initial_backoff_seconds,
        maximum=watch.max_backoff_seconds,
        reset_after=watch.backoff_reset_seconds,
    )

"""A private copy of the scheduler's state, built by the scheduler's own code.

`Facts` is what the daemon knows at one instant (the nodes and pods its watches hold, the
pods it assumed with their cards, namespace labels, the telemetry readings in its snapshot,
copies of its PodGroup, quota, volume, DRA and PodDisruptionBudget views, and the history
of the plugins that keep one); `World` replays those facts through the same ClusterEvents
handlers, ClusterCache, SchedulerHandle and Framework constructor the daemon uses, then
seeds the new plugin instances with that history (StatefulPlugin), so every plugin runs
exactly as it does in a scheduling cycle, on a copy.

Why a copy and not the daemon's own cache: the counterfactuals remove pods, change a
plugin's args or a pod's annotation and run the plugins again; the live snapshot is shared
with the scheduling loop and must never see that. And the search runs in another thread:
every view in Facts is a copy that thread alone reads (daemon/explain.py facts_of), since
the live views cache what their reads derive. The copies are only read; a counterfactual
that changes one wraps it (`QuotaOverride`) instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from gpusched.config import SchedulerConfig
from gpusched.config.profile import Profile
from gpusched.core.cache.cache import ClusterCache
from gpusched.core.cache.snapshot import Snapshot
from gpusched.core.dra_ledger import DraLedger
from gpusched.core.events import ClusterEvents
from gpusched.core.handle import SchedulerHandle
from gpusched.core.queue import SchedulingQueue
from gpusched.core.runtime.framework import Framework, pre_enqueue_of
from gpusched.framework.disruption import NO_DISRUPTION, DisruptionPort
from gpusched.framework.dra import NO_DRA, DraPort
from gpusched.framework.gangs import NO_GANGS, GangPort
from gpusched.framework.interfaces import Allocation, StatefulPlugin
from gpusched.framework.registry import Registry
from gpusched.framework.snapshot import TELEMETRY_CARD_COLUMNS
from gpusched.framework.status import Code, Status
from gpusched.framework.tenancy import NO_TENANCY, TenancyPort, TenantQuota
from gpusched.framework.volumes import NO_VOLUMES, VolumePort
from gpusched.model.node import NodeModel
from gpusched.model.pod import PodInfo
from gpusched.model.quota import Limits


@dataclass(frozen=True, slots=True)
class NodeReadings:
    """One node's telemetry columns as the snapshot held them (card arrays per column in
    TELEMETRY_CARD_COLUMNS order, then when each card was sampled, the node's hottest
    fresh card and its newest sample, and which cards telemetry took out of service)."""

    cards: tuple[NDArray[np.float32], ...]
    card_sampled_at: NDArray[np.float64]
    node_temp: float
    node_sampled_at: float
    card_sick: NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class PluginState:
    """A StatefulPlugin's exported history and the args it was drawn under: a copy whose
    plugin has other args (a counterfactual) starts without it, as a reload that changes
    the args starts a new instance."""

    args: object
    state: object


def plugin_states(frameworks: Mapping[str, Framework]) -> dict[tuple[str, str], PluginState]:
    """Every StatefulPlugin's history in these frameworks (call it where they run, between
    two scheduling cycles)."""
    out: dict[tuple[str, str], PluginState] = {}
    for profile, fw in frameworks.items():
        for name, plugin in fw.plugins.items():
            if isinstance(plugin, StatefulPlugin):
                out[(profile, name)] = PluginState(
                    fw.profile.plugin_args.get(name), plugin.export_state()
                )
    return out


@dataclass(slots=True)
class Facts:
    """Everything a World is built from (see the module docstring)."""

    config: SchedulerConfig
    profiles: Mapping[str, Profile]
    nodes: Sequence[NodeModel]
    # Every live pod as the API shows it: bound (any scheduler's) and pending.
    pods: Sequence[PodInfo]
    # Pods this scheduler placed and has not seen bound yet, with their cards.
    assumed: Sequence[tuple[PodInfo, Allocation]] = ()
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    readings: Mapping[str, NodeReadings] = field(default_factory=dict)
    gangs: GangPort = NO_GANGS
    tenancy: TenancyPort = NO_TENANCY
    volumes: VolumePort = NO_VOLUMES
    dra: DraPort = NO_DRA
    disruption: DisruptionPort = NO_DISRUPTION
    # (profile, plugin) -> a StatefulPlugin's history (plugin_states).
    plugin_states: Mapping[tuple[str, str], PluginState] = field(default_factory=dict)
    now: float = 0.0  # the scheduler's monotonic clock
    wall: float = 0.0  # unix seconds

    def without(self, uids: Iterable[str]) -> Facts:
        """These facts with the pods `uids` gone (deleted)."""
        gone = frozenset(uids)
        return replace(
            self,
            pods=[p for p in self.pods if p.uid not in gone],
            assumed=[(p, a) for p, a in self.assumed if p.uid not in gone],
        )

    def with_pods(self, pods: Iterable[PodInfo]) -> Facts:
        """These facts with `pods` added or replacing the pods of the same uid."""
        extra = {p.uid: p for p in pods}
        kept = [p for p in self.pods if p.uid not in extra]
        return replace(self, pods=[*kept, *extra.values()])


class _NoWrites:
    """The copy's cluster port: explaining never writes to the cluster."""

    async def bind(
        self, pod: PodInfo, node: str, annotations: Mapping[str, str] | None = None
    ) -> Status:
        return Status(Code.ERROR, ("explain never binds",))


class QuotaOverride:
    """A tenancy port that answers as `inner`, except that one tenant's quota has other
    limits (the quota counterfactual: "if quota X allowed 4 more GPUs")."""

    def __init__(self, inner: TenancyPort, tenant: str, max_limits: Limits) -> None:
        self.inner = inner
        self.tenant = tenant
        self.max_limits = max_limits

    @property
    def generation(self) -> int:
        return self.inner.generation

    def tenant_of(self, namespace: str) -> str:
        return self.inner.tenant_of(namespace)

    def quota(self, tenant: str) -> TenantQuota | None:
        q = self.inner.quota(tenant)
        if q is None or tenant != self.tenant:
            return q
        return replace(q, max=self.max_limits)

    def quotas(self) -> Iterable[TenantQuota]:
        return tuple(
            q if q.tenant != self.tenant else replace(q, max=self.max_limits)
            for q in self.inner.quotas()
        )


class World:
    """The daemon's cache, handle, frameworks and event handlers, rebuilt from Facts."""

    def __init__(self, facts: Facts, registry: Registry) -> None:
        self.facts = facts
        config = facts.config
        now, wall = facts.now, facts.wall
        clock: Callable[[], float] = lambda: now  # noqa: E731 - a frozen clock: one instant
        self.cache = ClusterCache(
            Snapshot(config.max_cards_per_node, capacity=max(64, len(facts.nodes)))
        )
        self.handle = SchedulerHandle(
            self.cache,
            _NoWrites(),
            clock,
            volumes=facts.volumes,
            gangs=facts.gangs,
            dra=facts.dra,
            tenancy=facts.tenancy,
            disruption=facts.disruption,
            wall=lambda: wall,
        )
        self.frameworks: dict[str, Framework] = {
            name: Framework(
                profile,
                registry,
                self.handle,
                seed=config.tie_break_seed,
                waiting=self.handle.waiting,
            )
            for name, profile in facts.profiles.items()
        }
        first = next(iter(self.frameworks.values()))
        self.queue = SchedulingQueue(
            first.less, clock, pre_enqueue=pre_enqueue_of(self.frameworks), fair=first.fair
        )
        self.queue.tenant_of = facts.tenancy.tenant_of
        queue = self.queue
        self.handle.pending = lambda uid: bool(queue.where(uid))
        self.events = ClusterEvents(
            self.cache,
            self.queue,
            [self.handle.waiting],
            self.frameworks,
            gangs=self.handle.gang_index,
            dra=facts.dra,
        )
        for name, labels in facts.namespaces.items():
            self.cache.set_namespace(name, labels)
        for node in facts.nodes:
            self.events.node_changed(node)
        # Bound pods first, then the assumed ones with the cards the daemon gave them, then
        # the pending pods (the queue and the gang index learn them as the daemon's did).
        assumed = {p.uid for p, _ in facts.assumed}
        for pod in facts.pods:
            if pod.node_name:
                self.events.pod_changed(pod)
        for pod, alloc in facts.assumed:
            if self.cache.get(pod.uid) is None:
                self.cache.assume(pod, alloc)
        for pod in facts.pods:
            if not pod.node_name:
                self.events.pod_changed(pod)
        for pod, _ in facts.assumed:
            self.handle.gang_index.update(pod)
        self._copy_readings(facts.readings)
        # The plugins' history, once the copy's rows exist (it names nodes), before the
        # first look at the readings (Thermal's latch is brought up to date from it).
        for (profile, name), carried in facts.plugin_states.items():
            fw = self.frameworks.get(profile)
            plugin = fw.plugins.get(name) if fw is not None else None
            if (
                fw is not None
                and isinstance(plugin, StatefulPlugin)
                and fw.profile.plugin_args.get(name) == carried.args
            ):
                plugin.import_state(carried.state)
        self.dra_ledger = DraLedger(self.cache, facts.dra)
        self.dra_ledger.sync()
        bound: dict[str, list[PodInfo]] = {name: [] for name in self.frameworks}
        for entry in self.cache.allocations():
            if not entry.assumed and entry.pod.uid not in assumed:
                bound.setdefault(entry.pod.scheduler_name, []).append(entry.pod)
        for name, fw in self.frameworks.items():
            fw.warm_start(bound[name])
            fw.telemetry_updated()

    @contextmanager
    def without(self, pods: Sequence[PodInfo]) -> Iterator[None]:
        """These placed pods gone from this copy for the block (through the same deletion
        handler as a watch's DELETED), then put back as they were. The victim searches
        probe with it instead of rebuilding the copy per trial; what they find is then
        verified on a copy built afresh from the Facts."""
        allocs = {p.uid: a for p, a in self.facts.assumed}
        gone = [p for p in pods if self.cache.get(p.uid) is not None]
        for pod in gone:
            self.events.pod_deleted(pod)
        try:
            yield
        finally:
            for pod in gone:
                alloc = allocs.get(pod.uid)
                if alloc is not None:
                    self.cache.assume(pod, alloc)
                    self.handle.gang_index.update(pod)
                else:
                    self.events.pod_changed(pod)

    def _copy_readings(self, readings: Mapping[str, NodeReadings]) -> None:
        """The daemon's telemetry columns, row by row (the copy's rows may be ordered
        differently). Only the copy's snapshot is written."""
        snap = self.cache.snapshot
        for name, r in readings.items():
            row = snap.row_of(name)
            if row < 0:
                continue
            n = min(len(r.card_sampled_at), snap.card_sampled_at.shape[1])
            for column, values in zip(TELEMETRY_CARD_COLUMNS, r.cards, strict=True):
                getattr(snap, column)[row, :n] = values[:n]
            snap.card_sampled_at[row, :n] = r.card_sampled_at[:n]
            snap.node_temp[row] = r.node_temp
            snap.node_sampled_at[row] = r.node_sampled_at
            for card in np.flatnonzero(r.card_sick[:n]):
                snap.set_card_sick(row, int(card), True)
        snap.telemetry_version += 1


def readings_of(snap: Snapshot) -> dict[str, NodeReadings]:
    """Every node's telemetry columns in `snap` (copies), for Facts.readings."""
    out: dict[str, NodeReadings] = {}
    for name, row in snap.rows.items():
        out[name] = NodeReadings(
            tuple(np.array(getattr(snap, c)[row]) for c in TELEMETRY_CARD_COLUMNS),
            np.array(snap.card_sampled_at[row]),
            float(snap.node_temp[row]),
            float(snap.node_sampled_at[row]),
            np.array(snap.card_sick[row]),
        )
    return out

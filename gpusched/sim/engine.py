"""The simulator: the daemon's framework, plugins, cache and cycles over an in-memory
cluster and a virtual clock. Only the ClusterPort and the clock differ from the daemon."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from gpusched.config.profile import Profile
from gpusched.core.cache.cache import ClusterCache
from gpusched.core.cache.snapshot import Snapshot
from gpusched.core.handle import SchedulerHandle
from gpusched.core.runtime.framework import Framework, TieBreak
from gpusched.core.scheduler import Decision, Result, SchedulingCycle, run_sync
from gpusched.framework.registry import Registry
from gpusched.framework.status import Code, Status
from gpusched.model import keys
from gpusched.model.node import NodeModel
from gpusched.model.pod import PodInfo, parse_gpu_ids
from gpusched.sim.thermal import ThermalModel


class VirtualClock:
    def __init__(self, start: float = 0.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance_to(self, t: float) -> None:
        self.t = max(self.t, t)


class InMemoryCluster:
    """The ClusterPort of the simulator: a bind is seen by the cache at once, as the
    daemon's watch would deliver it, with the annotations written at PreBind."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self._pending: dict[str, dict[str, str]] = {}
        self.bound: dict[str, PodInfo] = {}

    async def annotate(self, pod: PodInfo, annotations: Mapping[str, str]) -> Status:
        self._pending.setdefault(pod.uid, {}).update(annotations)
        return Status()

    async def bind(self, pod: PodInfo, node: str) -> Status:
        if pod.uid in self.bound:
            return Status(Code.ERROR, (f"pod {pod.key} is already bound",))
        ann = {**pod.annotations, **self._pending.pop(pod.uid, {})}
        raw = ann.get(keys.GPU_IDS)
        ids = parse_gpu_ids(raw) if raw else ()
        bound = dataclasses.replace(
            pod, node_name=node, annotations=ann, gpu_ids=ids, phase="Running"
        )
        self.bound[pod.uid] = bound
        self.cache.add_or_update_pod(bound)
        return Status()

    def delete(self, uid: str) -> None:
        self.bound.pop(uid, None)
        self.cache.remove_pod(uid)


class Simulation:
    def __init__(
        self,
        nodes: Iterable[NodeModel],
        profile: Profile,
        registry: Registry,
        *,
        seed: int = 0,
        idle_temperatures: Mapping[str, float] | None = None,
        max_cards: int = 8,
        tie_break: TieBreak | None = None,
    ) -> None:
        node_list = list(nodes)
        self.clock = VirtualClock()
        self.cache = ClusterCache(Snapshot(max_cards, capacity=max(64, len(node_list))))
        for node in node_list:
            self.cache.upsert_node(node)
        # Without idle temperatures the nodes report none (NaN): Thermal scores neutral.
        self.thermal = ThermalModel(self.cache.snapshot, idle_temperatures or {})
        self.cluster = InMemoryCluster(self.cache)
        self.handle = SchedulerHandle(self.cache, self.cluster, self.clock)
        self.fw = Framework(profile, registry, self.handle, seed=seed, tie_break=tie_break)
        self.cycle = SchedulingCycle(self.fw, self.cache, assume_ttl=float("inf"))

    @property
    def snapshot(self) -> Snapshot:
        return self.cache.snapshot

    def submit(self, pod: PodInfo, *, keep_scores: bool = False) -> Decision:
        decision = self.cycle.schedule(pod, keep_scores=keep_scores)
        if decision.result is Result.SCHEDULED:
            st = run_sync(self.cycle.bind(decision))
            if not st.is_success():
                decision.result = Result.ERROR
                decision.status = st
            elif decision.alloc is not None:
                self.thermal.update(decision.alloc.row)
        return decision

    def delete(self, uid: str) -> None:
        entry = self.cache.get(uid)
        self.cluster.delete(uid)
        if entry is not None and entry.alloc is not None:
            self.thermal.update(entry.alloc.row)

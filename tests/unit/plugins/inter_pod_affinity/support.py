"""Builders for InterPodAffinity tests: pod (anti-)affinity dicts as in a pod spec, and a
cluster of nodes and bound pods behind a real cache and handle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gpusched.core.cache.cache import ClusterCache
from gpusched.core.handle import SchedulerHandle
from gpusched.framework import CycleState
from gpusched.model.node import NodeModel
from gpusched.model.pod import PodInfo, PodRequest
from gpusched.plugins.inter_pod_affinity import InterPodAffinity, InterPodAffinityArgs
from tests.builders import all_rows, node, snapshot
from tests.fakes import FakeCluster

HOST = "kubernetes.io/hostname"
REGION = "region"
ZONE = "zone"


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


def sel(*exprs: dict[str, Any], **labels: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if exprs:
        out["matchExpressions"] = list(exprs)
    if labels:
        out["matchLabels"] = dict(labels)
    return out


def term(selector: dict[str, Any] | None, key: str, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"topologyKey": key, **kw}
    if selector is not None:
        out["labelSelector"] = selector
    return out


def weighted(weight: int, t: dict[str, Any]) -> dict[str, Any]:
    return {"weight": weight, "podAffinityTerm": t}


def affinity(
    required: Sequence[dict[str, Any]] = (),
    preferred: Sequence[dict[str, Any]] = (),
    anti: Sequence[dict[str, Any]] = (),
    anti_preferred: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if required or preferred:
        out["podAffinity"] = {
            k: list(v)
            for k, v in (
                ("requiredDuringSchedulingIgnoredDuringExecution", required),
                ("preferredDuringSchedulingIgnoredDuringExecution", preferred),
            )
            if v
        }
    if anti or anti_preferred:
        out["podAntiAffinity"] = {
            k: list(v)
            for k, v in (
                ("requiredDuringSchedulingIgnoredDuringExecution", anti),
                ("preferredDuringSchedulingIgnoredDuringExecution", anti_preferred),
            )
            if v
        }
    return out


def apod(
    name: str,
    labels: Mapping[str, str] | None = None,
    aff: Mapping[str, Any] | None = None,
    *,
    namespace: str = "ns",
    node: str = "",
) -> PodInfo:
    return PodInfo(
        uid=f"uid-{name}",
        namespace=namespace,
        name=name,
        request=PodRequest(),
        labels=dict(labels or {}),
        affinity=dict(aff or {}),
        node_name=node,
    )


def lnode(name: str, **labels: str) -> NodeModel:
    return node(name, labels={HOST: name, **labels})


class Cluster:
    def __init__(
        self,
        nodes: Sequence[NodeModel],
        pods: Sequence[PodInfo] = (),
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
        args: InterPodAffinityArgs | None = None,
    ) -> None:
        self.cache = ClusterCache(snapshot(*nodes))
        for p in pods:
            self.cache.add_or_update_pod(p)
        for ns, labels in (namespaces or {}).items():
            self.cache.set_namespace(ns, labels)
        self.handle = SchedulerHandle(self.cache, FakeCluster(), lambda: 0.0)
        self.plugin = InterPodAffinity(args, self.handle)

    @property
    def snap(self) -> Any:
        return self.cache.snapshot

    def filter(self, incoming: PodInfo) -> dict[str, str]:
        """node -> "" when it passes, else the reason (and "!" appended when the rejection
        is unresolvable); "skip" for every node when PreFilter skips."""
        state = CycleState()
        _, st = self.plugin.pre_filter(state, incoming)
        snap = self.snap
        names = [snap.names[r] for r in snap.valid_rows()]
        if st.is_skip():
            return dict.fromkeys(names, "skip")
        assert st.is_success(), st
        mask = all_rows(snap)
        res = self.plugin.filter(state, incoming, mask)
        out: dict[str, str] = {}
        for r in snap.valid_rows():
            name = snap.names[r]
            if res.feasible[r]:
                out[name] = ""
                continue
            code = 0 if res.codes is None else int(res.codes[r])
            unres = res.unresolvable
            hard = bool(unres) if isinstance(unres, bool) else bool(unres[r])
            out[name] = res.reasons[code] + ("!" if hard else "")
        return out

    def scores(self, incoming: PodInfo) -> dict[str, float] | None:
        """Normalised scores by node; None when PreScore skips."""
        state = CycleState()
        rows = self.snap.valid_rows()
        st = self.plugin.pre_score(state, incoming, rows)
        if st.is_skip():
            return None
        assert st.is_success(), st
        raw = self.plugin.score(state, incoming, rows)
        self.plugin.normalize(state, incoming, raw)
        return {self.snap.names[r]: float(s) for r, s in zip(rows, raw, strict=True)}

    def raw_scores(self, incoming: PodInfo) -> dict[str, int]:
        state = CycleState()
        rows = self.snap.valid_rows()
        assert self.plugin.pre_score(state, incoming, rows).is_success()
        raw = self.plugin.score(state, incoming, rows)
        return {self.snap.names[r]: int(s) for r, s in zip(rows, np.asarray(raw), strict=True)}

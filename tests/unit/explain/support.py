"""Facts for the explain engine's unit tests: KWOK-shaped nodes and pods parsed by the
daemon's own parsers, the default profile."""

from __future__ import annotations

import itertools
from typing import Any

from gpusched.config import default_config
from gpusched.devcluster.nodes import NodeSpec, node_object
from gpusched.devcluster.testkit import pod_manifest
from gpusched.explain import Facts
from gpusched.framework.registry import Registry
from gpusched.framework.tenancy import NO_TENANCY, TenancyPort
from gpusched.model import keys
from gpusched.model.node import TopologyKeys, node_from_k8s
from gpusched.model.pod import PodInfo, pod_from_k8s
from gpusched.plugins import default_registry

_uid = itertools.count()
REGISTRY: Registry = default_registry()


def node(name: str, gpus: int = 8, model: str = "A100M80", island: int = 8) -> Any:
    spec = NodeSpec(name, gpus, model, 96_000, 1_048_576, "rack-0", "spine-0", island)
    return node_from_k8s(node_object(spec), TopologyKeys())


def pod(
    name: str,
    gpus: int = 0,
    *,
    node_name: str = "",
    cards: str = "",
    priority: int = 0,
    namespace: str = "team",
    node_selector: dict[str, str] | None = None,
    **kw: Any,
) -> PodInfo:
    raw = pod_manifest(name, gpus=gpus, **kw)
    raw["metadata"]["namespace"] = namespace
    if node_selector:
        raw["spec"]["nodeSelector"] = dict(node_selector)
    raw["metadata"]["uid"] = f"uid-{next(_uid)}"
    raw["spec"]["priority"] = priority
    if node_name:
        raw["spec"]["nodeName"] = node_name
        raw["status"] = {"phase": "Running"}
        if cards:
            raw["metadata"]["annotations"][keys.GPU_IDS] = cards
    return pod_from_k8s(raw)


def facts(
    nodes: list[Any], pods: list[PodInfo], tenancy: TenancyPort = NO_TENANCY, **kw: Any
) -> Facts:
    config = default_config(REGISTRY)
    return Facts(
        config=config,
        profiles={p.scheduler_name: p for p in config.profiles},
        nodes=nodes,
        pods=pods,
        tenancy=tenancy,
        now=1000.0,
        wall=1_700_000_000.0,
        **kw,
    )

"""The differential workload: one seeded set of nodes, volumes and pods that kube-scheduler
and gpusched are each given on a fresh, identical local control plane
(tests/integration/test_differential.py), the outcomes judged by diffcheck.py.

The workload mixes the constraint features a user points at any scheduler; which ones is a
parameter (`features`, names in FEATURES), so a feature gpusched does not enforce yet is
left out rather than failing the comparison. Its pods are of two kinds:

* **feasible** pods, each provably placeable whatever the order and whatever node either
  scheduler picks for the others (`unproven` checks the argument for every one of them, and
  a unit test runs it on the seeds the integration test uses): both schedulers must bind
  every one;
* **impossible** pods (`Workload.impossible`), each rejected by every node for a reason
  that no placement of the other pods changes (a node selector naming no node, a port an
  anchor pod already holds, ...): both must leave every one unbound, and their
  FailedScheduling messages must count the same reasons over the same nodes.

Plus gated pods (both must leave them unbound) and anchor pods created with spec.nodeName
(no scheduler involved: they hold resources, ports and labels the others must respect).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpusched.devcluster import diffcheck
from gpusched.devcluster.bootstrap import wait_nodes_ready
from gpusched.devcluster.nodes import NodeSpec, node_object
from gpusched.devcluster.testkit import watch_items
from gpusched.kube import Kube, create_namespace, create_nodes, pod_path

JSON = dict[str, Any]

FEATURES = frozenset(
    {
        "resources",  # cpu, memory, nvidia.com/gpu, ephemeral-storage, hugepages, rdma/hca
        "node_name",  # anchor pods created bound (spec.nodeName)
        "ports",  # host ports
        "gates",  # spec.schedulingGates
        "node_affinity",  # nodeSelector, required and preferred node affinity
        "taints",  # taints and tolerations
        "unschedulable",  # a cordoned node
        "pod_affinity",  # required pod affinity and anti-affinity
        "spread",  # hard topology spread, minDomains
        "volumes",  # claims bound to PVs with node affinity, unbound immediate claims
    }
)
# What gpusched enforces: every feature above (InterPodAffinity, PodTopologySpread and the
# volume plugins joined in issue 11).
ENFORCED = FEATURES

NAMESPACE = "diff"
OTHER_NAMESPACE = "diff-other"
ZONE = "topology.kubernetes.io/zone"
ZONES = ("zone-a", "zone-b", "zone-c")
DEDICATED = "diff.gpusched.io/dedicated"
PREBOUND = "diff.gpusched.io/prebound"  # label of the anchor pods
KIND = "diff.gpusched.io/kind"  # label: which generator rule made the pod
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
GPU = "nvidia.com/gpu"
RDMA = "rdma/hca"
HUGEPAGES = "hugepages-2Mi"
NODE_COUNT = 24
DEDICATED_NODES = (5, 10, 15)  # one per zone, tainted dedicated=infer:NoSchedule
CORDONED_NODE = 23
# (gpus, model, cpu milli, memory MiB, NVLink island size), as the generated fleet's.
_SHAPES = (
    (8, "A100M80", 96_000, 1_048_576, 8),
    (2, "T4", 32_000, 131_072, 0),
    (8, "V100M32", 64_000, 524_288, 8),
    (2, "T4", 32_000, 131_072, 0),
)


def node_name(i: int) -> str:
    return f"diff-{i:02d}"


def fleet() -> list[JSON]:
    """NODE_COUNT KWOK GPU nodes over three zones: A100 nodes with RDMA HCAs and 2Mi
    hugepages, three dedicated (tainted) nodes, one cordoned."""
    nodes = []
    for i in range(NODE_COUNT):
        gpus, model, cpu, mem, island = _SHAPES[i % len(_SHAPES)]
        spec = NodeSpec(
            name=node_name(i),
            gpus=gpus,
            model=model,
            cpu_milli=cpu,
            memory_mib=mem,
            rack=f"rack-{i // 8}",
            spine="spine-0",
            nvlink_island_size=island,
        )
        node = node_object(spec)
        node["metadata"]["labels"][ZONE] = ZONES[i % len(ZONES)]
        # 256 pods a node (a kubelet's --max-pods may say so; the default is 110): the
        # pod count then never is what keeps a feasible pod off the last candidate node.
        extra = {"ephemeral-storage": "400Gi", "pods": "256"}
        if i % len(_SHAPES) == 0:
            extra |= {RDMA: "4", HUGEPAGES: "4Gi"}
        for part in ("capacity", "allocatable"):
            node["status"][part].update(extra)
        if i in DEDICATED_NODES:
            node["metadata"]["labels"][DEDICATED] = "infer"
            node["spec"]["taints"] = [{"key": DEDICATED, "value": "infer", "effect": "NoSchedule"}]
        if i == CORDONED_NODE:
            node["spec"]["unschedulable"] = True
        nodes.append(node)
    return nodes


@dataclass
class Workload:
    features: frozenset[str]
    nodes: list[JSON]
    namespaces: dict[str, dict[str, str]]
    volumes: list[JSON] = field(default_factory=list)  # PersistentVolumes
    claims: list[JSON] = field(default_factory=list)  # PVCs (metadata.namespace set)
    anchors: list[JSON] = field(default_factory=list)  # pods created with spec.nodeName
    pods: list[JSON] = field(default_factory=list)  # pods for a scheduler
    impossible: dict[str, str] = field(default_factory=dict)  # "ns/name" -> why
    gated: set[str] = field(default_factory=set)  # "ns/name"

    @property
    def feasible(self) -> list[JSON]:
        skip = set(self.impossible) | self.gated
        return [p for p in self.pods if diffcheck.pod_key(p) not in skip]

    def for_scheduler(self, scheduler_name: str) -> list[JSON]:
        """The pods, each with spec.schedulerName set."""
        out = []
        for pod in self.pods:
            copy = {**pod, "spec": {**pod["spec"], "schedulerName": scheduler_name}}
            out.append(copy)
        return out


# -- pods ------------------------------------------------------------------------------------


def pod(
    name: str,
    kind: str,
    *,
    namespace: str = NAMESPACE,
    cpu: str = "100m",
    memory: str = "128Mi",
    extra: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    affinity: JSON | None = None,
    tolerations: Iterable[JSON] = (),
    ports: Iterable[JSON] = (),
    gates: Iterable[str] = (),
    spread: Iterable[JSON] = (),
    claims: Iterable[str] = (),
    node: str = "",
) -> JSON:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v} | dict(extra or {})
    # Extended resources and hugepages may not be overcommitted: limits equal requests.
    limits = {k: v for k, v in requests.items() if k not in ("cpu", "memory")}
    if HUGEPAGES in limits:
        limits["memory"] = memory  # hugepages need a memory or cpu limit alongside
    container: JSON = {
        "name": "main",
        "image": PAUSE_IMAGE,
        "resources": {"requests": requests, **({"limits": limits} if limits else {})},
    }
    if ports:
        container["ports"] = list(ports)
    spec: JSON = {"containers": [container], "terminationGracePeriodSeconds": 0}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity:
        spec["affinity"] = affinity
    if tolerations:
        spec["tolerations"] = list(tolerations)
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    if spread:
        spec["topologySpreadConstraints"] = list(spread)
    if claims:
        spec["volumes"] = [
            {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}}
            for i, c in enumerate(claims)
        ]
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {KIND: kind, **(labels or {})},
        },
        "spec": spec,
    }


def _required_affinity(terms: list[JSON]) -> JSON:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }


def _pod_term(selector: Mapping[str, str], topology_key: str, **extra: Any) -> JSON:
    return {"labelSelector": {"matchLabels": dict(selector)}, "topologyKey": topology_key, **extra}


def _hostname(i: int) -> dict[str, str]:
    return {diffcheck.HOSTNAME: node_name(i)}


TOLERATE_DEDICATED = {
    "key": DEDICATED,
    "operator": "Equal",
    "value": "infer",
    "effect": "NoSchedule",
}
TOLERATE_CORDON = {
    "key": diffcheck.UNSCHEDULABLE_TAINT,
    "operator": "Exists",
    "effect": "NoSchedule",
}


class _Builder:
    def __init__(self, seed: int, features: frozenset[str]) -> None:
        self.rng = random.Random(seed)
        self.features = features
        self.w = Workload(
            features=features,
            nodes=fleet(),
            namespaces={NAMESPACE: {"team": "main"}, OTHER_NAMESPACE: {"team": "other"}},
        )
        self.n = 0

    def name(self, kind: str) -> str:
        self.n += 1
        return f"{kind}-{self.n:03d}"

    def add(self, kind: str, **kw: Any) -> JSON:
        p = pod(self.name(kind), kind, **kw)
        self.w.pods.append(p)
        return p

    def impossible(self, kind: str, why: str, **kw: Any) -> None:
        # Nothing requested but what makes it impossible: a node that the others happened
        # to fill would add "Insufficient cpu" to one scheduler's message only.
        p = self.add(kind, **{"cpu": "", "memory": "", **kw})
        self.w.impossible[diffcheck.pod_key(p)] = why

    def anchor(self, kind: str, node: int, **kw: Any) -> None:
        labels = {PREBOUND: "true", **kw.pop("labels", {})}
        self.w.anchors.append(pod(self.name(kind), kind, node=node_name(node), labels=labels, **kw))

    def on(self, *features: str) -> bool:
        return all(f in self.features for f in features)


def generate(seed: int, features: Collection[str] = ENFORCED, *, plain: int = 120) -> Workload:
    """The workload for `seed` with the given features (names in FEATURES); `plain` small
    CPU pods fill it out to a few hundred pods. Pods come in a seeded shuffled order."""
    unknown = set(features) - FEATURES
    if unknown:
        raise ValueError(f"unknown features {sorted(unknown)}; known: {sorted(FEATURES)}")
    b = _Builder(seed, frozenset(features))
    rng = b.rng
    for _ in range(plain):
        b.add(
            "plain", cpu=rng.choice(("100m", "250m", "500m")), memory=rng.choice(("128Mi", "512Mi"))
        )
    if b.on("resources"):
        _resources(b)
    if b.on("node_name"):
        for i in (2, 7, 12, 17):
            b.anchor("anchor", i, cpu="4", memory="8Gi", extra={GPU: "1"})
    if b.on("ports"):
        _ports(b)
    if b.on("gates"):
        for _ in range(5):
            p = b.add("gated", gates=("example.com/hold",), extra={GPU: "1"})
            b.w.gated.add(diffcheck.pod_key(p))
    if b.on("node_affinity"):
        _node_affinity(b)
    if b.on("taints"):
        _taints(b)
    if b.on("unschedulable"):
        b.add("cordon-ok", node_selector=_hostname(CORDONED_NODE), tolerations=[TOLERATE_CORDON])
        b.impossible(
            "cordoned", "selects only the cordoned node", node_selector=_hostname(CORDONED_NODE)
        )
    if b.on("pod_affinity"):
        _pod_affinity(b)
    if b.on("spread"):
        _spread(b)
    if b.on("volumes"):
        _volumes(b)
    rng.shuffle(b.w.pods)
    return b.w


def _resources(b: _Builder) -> None:
    rng = b.rng
    for _ in range(10):
        b.add("gpu", cpu="500m", memory="1Gi", extra={GPU: str(rng.choice((1, 1, 2)))})
    # Four cards: only the 8-card nodes hold them.
    b.add("gpu4", cpu="1", memory="2Gi", extra={GPU: "4"})
    for _ in range(10):
        b.add("scratch", extra={"ephemeral-storage": rng.choice(("1Gi", "10Gi", "50Gi"))})
    for _ in range(2):
        b.add("rdma", cpu="500m", memory="1Gi", extra={GPU: "1", RDMA: "1"})
    for _ in range(3):
        b.add("hugepages", cpu="500m", memory="1Gi", extra={HUGEPAGES: "512Mi"})
    b.impossible("gpu16", "no node has 16 cards", extra={GPU: "16"})
    b.impossible("cpu1000", "no node has 1000 cores", cpu="1000")
    b.impossible("fpga", "no node offers example.com/fpga", extra={"example.com/fpga": "1"})
    b.impossible("scratch10t", "no node has 10Ti of scratch", extra={"ephemeral-storage": "10Ti"})


def _ports(b: _Builder) -> None:
    for _ in range(5):
        b.add("port8080", ports=[{"containerPort": 80, "hostPort": 8080}])
    for ip in ("127.0.0.1", "127.0.0.2"):
        # Two addresses of one port may share a node; the wildcard pods above may not.
        b.add("port8081", ports=[{"containerPort": 80, "hostPort": 8081, "hostIP": ip}])
    b.add("port8080udp", ports=[{"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}])
    if b.on("node_name"):
        b.anchor("port-anchor", 0, ports=[{"containerPort": 70, "hostPort": 7070}])
        b.impossible(
            "port7070",
            "its only node's port 7070 is held by an anchor pod",
            node_selector=_hostname(0),
            ports=[{"containerPort": 70, "hostPort": 7070}],
        )


def _node_affinity(b: _Builder) -> None:
    for zone in ZONES:
        for _ in range(4):
            b.add("zone", node_selector={ZONE: zone})
    for _ in range(4):
        b.add(
            "zones-ab",
            affinity=_required_affinity(
                [
                    {
                        "matchExpressions": [
                            {"key": ZONE, "operator": "In", "values": ["zone-a", "zone-b"]}
                        ]
                    }
                ]
            ),
        )
        b.add(
            "not-t4",
            extra={GPU: "1"},
            affinity=_required_affinity(
                [
                    {
                        "matchExpressions": [
                            {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["2"]}
                        ]
                    }
                ]
            ),
        )
        b.add(
            "by-name",
            # matchFields takes one name per In: two terms (ORed) for two nodes.
            affinity=_required_affinity(
                [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]}
                    for n in (node_name(3), node_name(4))
                ]
            ),
        )
        b.add(
            "prefer-c",
            affinity={
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 50,
                            "preference": {
                                "matchExpressions": [
                                    {"key": ZONE, "operator": "In", "values": ["zone-c"]}
                                ]
                            },
                        }
                    ]
                }
            },
        )
    b.impossible("zone-z", "no node is in zone-z", node_selector={ZONE: "zone-z"})
    b.impossible(
        "nowhere",
        "two terms, neither matching a node",
        affinity=_required_affinity(
            [
                {"matchExpressions": [{"key": ZONE, "operator": "DoesNotExist"}]},
                {
                    "matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": ["diff-99"]}
                    ]
                },
            ]
        ),
    )


def _taints(b: _Builder) -> None:
    for _ in range(5):
        b.add("dedicated", node_selector={DEDICATED: "infer"}, tolerations=[TOLERATE_DEDICATED])
    for _ in range(4):
        b.add("tolerant", tolerations=[{"operator": "Exists"}])
    b.impossible(
        "untolerated",
        "selects the dedicated nodes without tolerating their taint",
        node_selector={DEDICATED: "infer"},
    )


def _pod_affinity(b: _Builder) -> None:
    hostname = diffcheck.HOSTNAME
    for g in range(3):
        app = {"app": f"web-{g}"}
        for _ in range(4):
            b.add(
                "web",
                labels=app,
                affinity={
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [_pod_term(app, hostname)]
                    }
                },
            )
    for g in range(2):
        app = {"app": f"cache-{g}"}
        for _ in range(3):
            # A self-affine group: the first goes anywhere, the rest to its zone.
            b.add(
                "cache",
                labels=app,
                affinity={
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [_pod_term(app, ZONE)]
                    }
                },
            )
    # Anti-affinity across namespaces: away from the other team's pods by namespaceSelector.
    other = {"app": "other-db"}
    for _ in range(2):
        b.add("other-db", namespace=OTHER_NAMESPACE, labels=other)
    for _ in range(2):
        b.add(
            "shy",
            affinity={
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        _pod_term(
                            other, hostname, namespaceSelector={"matchLabels": {"team": "other"}}
                        )
                    ]
                }
            },
        )
    if b.on("node_name"):
        db = {"app": "db"}
        b.anchor("db-anchor", 1, labels=db)
        for _ in range(3):
            b.add(
                "near-db",
                affinity={
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [_pod_term(db, ZONE)]
                    }
                },
            )
        blocker = {"app": "blocker"}
        zone_c = [i for i in range(NODE_COUNT) if ZONES[i % 3] == "zone-c"]
        for i in zone_c:
            b.anchor("blocker", i, labels=blocker)
        b.impossible(
            "avoid-blockers",
            "zone-c only, and an anchor it avoids on every zone-c node",
            node_selector={ZONE: "zone-c"},
            tolerations=[TOLERATE_DEDICATED, TOLERATE_CORDON],
            affinity={
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [_pod_term(blocker, hostname)]
                }
            },
        )
    b.impossible(
        "lonely",
        "affinity to pods nobody runs, and it does not match its own term",
        affinity={
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    _pod_term({"app": "ghost"}, ZONE)
                ]
            }
        },
    )


def _spread_term(selector: Mapping[str, str], key: str, skew: int = 1, **extra: Any) -> JSON:
    return {
        "maxSkew": skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": dict(selector)},
        **extra,
    }


def _spread(b: _Builder) -> None:
    app = {"app": "spread-zone"}
    for _ in range(6):
        b.add("spread", labels=app, spread=[_spread_term(app, ZONE)])
    app = {"app": "spread-min"}
    for _ in range(3):
        b.add("spread-min", labels=app, spread=[_spread_term(app, ZONE, minDomains=3)])
    app = {"app": "spread-host"}
    for _ in range(6):
        b.add(
            "spread-host",
            labels=app,
            node_selector={ZONE: "zone-a"},
            spread=[_spread_term(app, diffcheck.HOSTNAME, skew=2)],
        )
    app = {"app": "spread-rackless"}
    b.impossible(
        "spread-nokey",
        "spreads over a label no node carries",
        labels=app,
        spread=[_spread_term(app, "diff.gpusched.io/no-such-key")],
    )


def _pv(
    name: str, *, zone: str | None, claim: str, modes: tuple[str, ...] = ("ReadWriteOnce",)
) -> JSON:
    spec: JSON = {
        "capacity": {"storage": "10Gi"},
        "accessModes": list(modes),
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": "",
        "claimRef": {"namespace": NAMESPACE, "name": claim},
    }
    if zone is None:
        spec["hostPath"] = {"path": f"/mnt/{name}"}
    else:
        spec["local"] = {"path": f"/mnt/{name}"}
        spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}
                ]
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": spec,
    }


def _pvc(name: str, volume: str = "", modes: tuple[str, ...] = ("ReadWriteOnce",)) -> JSON:
    spec: JSON = {
        "accessModes": list(modes),
        "storageClassName": "",
        "resources": {"requests": {"storage": "10Gi"}},
    }
    if volume:
        spec["volumeName"] = volume
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def _volumes(b: _Builder) -> None:
    for i, zone in enumerate(ZONES * 2):
        claim, volume = f"data-{i}", f"pv-data-{i}"
        b.w.volumes.append(_pv(volume, zone=zone, claim=claim))
        b.w.claims.append(_pvc(claim, volume))
        b.add("zonal-data", claims=(claim,))
    shared = ("ReadWriteMany",)
    b.w.volumes.append(_pv("pv-shared", zone=None, claim="shared", modes=shared))
    b.w.claims.append(_pvc("shared", "pv-shared", shared))
    for _ in range(4):
        b.add("shared-data", claims=("shared",))
    b.w.volumes.append(_pv("pv-zone-z", zone="zone-z", claim="zone-z"))
    b.w.claims.append(_pvc("zone-z", "pv-zone-z"))
    b.impossible("volume-zone-z", "its volume is pinned to zone-z", claims=("zone-z",))
    b.w.claims.append(_pvc("unbound"))
    b.impossible("volume-unbound", "its immediate claim has no volume", claims=("unbound",))


# -- why every feasible pod fits -------------------------------------------------------------


def _alloc(node: JSON) -> dict[str, Fraction]:
    return {k: diffcheck.quantity(v) for k, v in node["status"]["allocatable"].items()}


def unproven(w: Workload) -> list[str]:
    """The feasible pods for which the argument below fails (empty: every feasible pod of
    `w` is placed by any scheduler that honours the constraints, in any order).

    For a feasible pod p, let S be the nodes that admit it statically: node selector and
    affinity, taints, cordon, allocatable >= its request, no anchor holding its host ports
    or matching its anti-affinity, its volumes' node affinity, and for a pod that must share
    a zone with others (pod affinity to a group, a zone spread) only the worst single zone.
    Another pod can keep p off a node n of S in two ways only:

    * by sharing p's group (anti-affinity over hostnames, or the same host port): at most
      (group size - 1) nodes;
    * by using resource r on n past alloc(n, r) - request(p, r): filling k nodes that way
      takes more than the sum of the k smallest such slacks in S, out of the total request
      D(r) of all pods for r.

    If the nodes so blockable, summed over the resources and the group, are fewer than |S|,
    p finds a node whenever it is tried."""
    claims = {f"{c['metadata']['namespace']}/{c['metadata']['name']}": c for c in w.claims}
    volumes = {v["metadata"]["name"]: v for v in w.volumes}
    # What the anchors hold is where they are: it lowers those nodes' room.
    room = {n["metadata"]["name"]: _alloc(n) for n in w.nodes}
    for a in w.anchors:
        left = room[a["spec"]["nodeName"]]
        for k, v in {**diffcheck.pod_requests(a), "pods": Fraction(1)}.items():
            left[k] = left.get(k, Fraction(0)) - v
    feasible = w.feasible
    admits = {
        id(p): {n["metadata"]["name"] for n in w.nodes if _admits(w, p, n, claims, volumes)}
        for p in feasible
    }
    requests = {id(p): {**diffcheck.pod_requests(p), "pods": Fraction(1)} for p in feasible}
    out = []
    for p in feasible:
        siblings = _siblings(p, feasible)
        for subset in _zone_choices(p, admits[id(p)], w.nodes):
            # Only pods that may land in the subset use room there.
            demand: dict[str, Fraction] = defaultdict(Fraction)
            for q in feasible:
                if q is not p and admits[id(q)] & subset:
                    for k, v in requests[id(q)].items():
                        demand[k] += v
            blockable = siblings
            for r, amount in requests[id(p)].items():
                slacks = sorted(room[n].get(r, Fraction(0)) - amount for n in subset)
                spent, blocked = Fraction(0), 0
                for s in slacks:
                    if spent + max(s, Fraction(0)) >= demand[r] and s >= 0:
                        break
                    spent += max(s, Fraction(0))
                    blocked += 1
                blockable += blocked
            if blockable >= len(subset):
                out.append(
                    f"{diffcheck.pod_key(p)}: {blockable} of {len(subset)} candidate nodes"
                    " could be taken by other pods"
                )
                break
    return out


def _admits(
    w: Workload, p: JSON, node: JSON, claims: Mapping[str, JSON], volumes: Mapping[str, JSON]
) -> bool:
    if not diffcheck.pod_node_affinity_matches(p, node):
        return False
    if diffcheck.untolerated_taints(p, node) or diffcheck.unschedulable_blocks(p, node):
        return False
    alloc = _alloc(node)
    if any(v > alloc.get(k, Fraction(0)) for k, v in diffcheck.pod_requests(p).items()):
        return False
    name = node["metadata"]["name"]
    here = [a for a in w.anchors if a["spec"]["nodeName"] == name]
    for a in here:
        if any(
            diffcheck.ports_clash(x, y)
            for x in diffcheck.host_ports(p)
            for y in diffcheck.host_ports(a)
        ):
            return False
    affinity = p["spec"].get("affinity") or {}
    anti = (affinity.get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or ()
    for term in anti:
        selector = term["labelSelector"]
        if any(diffcheck.label_selector_matches(selector, diffcheck.labels_of(a)) for a in here):
            return False
    ns = p["metadata"]["namespace"]
    for v in p["spec"].get("volumes") or ():
        claim = claims[f"{ns}/{v['persistentVolumeClaim']['claimName']}"]
        pv = volumes.get(claim["spec"].get("volumeName", ""))
        if pv is None:
            return False
        required = (pv["spec"].get("nodeAffinity") or {}).get("required")
        if not diffcheck.node_selector_matches(required, node):
            return False
    required = (affinity.get("podAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or ()
    for term in required:
        anchors = [
            a
            for a in w.anchors
            if diffcheck.label_selector_matches(term["labelSelector"], diffcheck.labels_of(a))
        ]
        if anchors:
            tk = term["topologyKey"]
            domains = {_anchor_node(w, a)["metadata"]["labels"].get(tk) for a in anchors}
            if node["metadata"]["labels"].get(tk) not in domains:
                return False
    return True


def _anchor_node(w: Workload, anchor: JSON) -> JSON:
    return next(n for n in w.nodes if n["metadata"]["name"] == anchor["spec"]["nodeName"])


def _anti_terms(p: JSON) -> list[JSON]:
    affinity = p["spec"].get("affinity") or {}
    terms = (affinity.get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return list(terms or ())


def _selects(p: JSON, q: JSON) -> bool:
    """p keeps q off its node: p's anti-affinity selects q (namespaces ignored: counting
    too many only weakens the argument), or their host ports clash."""
    labels = diffcheck.labels_of(q)
    if any(diffcheck.label_selector_matches(t["labelSelector"], labels) for t in _anti_terms(p)):
        return True
    return any(
        diffcheck.ports_clash(x, y)
        for x in diffcheck.host_ports(p)
        for y in diffcheck.host_ports(q)
    )


def _spread_mates(p: JSON, q: JSON) -> bool:
    """q counts in one of p's hard spread constraints over hostnames."""
    labels = diffcheck.labels_of(q)
    return any(
        c.get("topologyKey") == diffcheck.HOSTNAME
        and diffcheck.label_selector_matches(c["labelSelector"], labels)
        for c in p["spec"].get("topologySpreadConstraints") or ()
    )


def _siblings(p: JSON, pods: Iterable[JSON]) -> int:
    """How many nodes other pods can close to p without using any resource: those that
    p's or their anti-affinity or host ports keep apart from p, and the members of a
    hostname spread (a node is closed to p only while it holds more of them than the
    emptiest)."""
    return sum(
        1 for q in pods if q is not p and (_selects(p, q) or _selects(q, p) or _spread_mates(p, q))
    )


def _zone_choices(p: JSON, admits: set[str], nodes: Iterable[JSON]) -> list[set[str]]:
    """The candidate node sets to prove p against: all it admits, or each zone's share
    when p may be confined to one zone (a self-affine group, a zone spread)."""
    spec = p["spec"]
    affinity = spec.get("affinity") or {}
    zonal = any(
        t.get("topologyKey") == ZONE
        for t in (affinity.get("podAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or ()
    ) or any(c.get("topologyKey") == ZONE for c in spec.get("topologySpreadConstraints") or ())
    if not zonal:
        return [admits]
    per_zone: dict[str, set[str]] = defaultdict(set)
    for n in nodes:
        if n["metadata"]["name"] in admits:
            per_zone[n["metadata"]["labels"][ZONE]].add(n["metadata"]["name"])
    return list(per_zone.values())


# -- running it on a cluster ----------------------------------------------------------------


def _condition(pod: Mapping[str, Any], type_: str) -> JSON:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return dict(c)
    return {}


@dataclass
class Result:
    """What one scheduler made of the workload, read back from the API."""

    scheduler: str
    outcome: diffcheck.Outcome
    messages: dict[str, str]  # impossible pod -> its latest FailedScheduling message
    seconds: float  # from the first pod created to every pod settled

    @property
    def bound(self) -> set[str]:
        return {diffcheck.pod_key(p) for p in self.outcome.placed}


def unsettled(w: Workload, pods: Mapping[str, JSON]) -> dict[str, str]:
    """The workload's pods not yet where they end: a feasible pod unbound, an impossible
    one not reported Unschedulable (or bound), a gated one not SchedulingGated; each with
    its PodScheduled condition."""
    out = {}
    for key, end in (
        *((diffcheck.pod_key(p), "bound") for p in w.feasible),
        *((k, "Unschedulable") for k in w.impossible),
        *((k, "SchedulingGated") for k in w.gated),
    ):
        pod = pods.get(key, {})
        cond = _condition(pod, "PodScheduled")
        bound = bool(diffcheck.node_of(pod))
        there = bound if end == "bound" else not bound and cond.get("reason") == end
        if not there:
            out[key] = f"want {end}, have {'bound' if bound else cond or 'no condition'}"
    return out


async def prepare(kube: Kube, w: Workload) -> None:
    """Everything but the pods for a scheduler: namespaces, nodes (Ready), volumes and
    claims (pre-bound ones Bound), and the anchor pods."""
    for name, labels in w.namespaces.items():
        await create_namespace(kube, name, labels)
    await create_nodes(kube, w.nodes)
    await wait_nodes_ready(kube, [n["metadata"]["name"] for n in w.nodes])
    for pv in w.volumes:
        await kube.post("/api/v1/persistentvolumes", pv)
    for claim in w.claims:
        await kube.post(
            f"/api/v1/namespaces/{claim['metadata']['namespace']}/persistentvolumeclaims", claim
        )
    prebound = {
        f"{c['metadata']['namespace']}/{c['metadata']['name']}"
        for c in w.claims
        if c["spec"].get("volumeName")
    }
    if prebound:
        # The PV controller completes the binding the objects ask for; kube-scheduler
        # treats a claim as bound only then.
        await watch_items(
            kube,
            "/api/v1/persistentvolumeclaims",
            lambda claims: all(
                (claims.get(k, {}).get("status") or {}).get("phase") == "Bound" for k in prebound
            ),
            what="the pre-bound claims Bound",
        )
    await _create_pods(kube, w.anchors)


async def _create_pods(kube: Kube, pods: Iterable[JSON]) -> None:
    sem = asyncio.Semaphore(16)

    async def one(p: JSON) -> None:
        async with sem:
            await kube.post(pod_path(p["metadata"]["namespace"]), p)

    await asyncio.gather(*(one(p) for p in pods))


async def run_pods(kube: Kube, w: Workload, scheduler: str, *, timeout: float = 120.0) -> Result:  # noqa: ASYNC109
    """Create the workload's pods for `scheduler` (which must be serving), wait until every
    feasible pod is bound and every impossible one reported Unschedulable with a
    FailedScheduling Event, and read the outcome back."""
    t0 = time.monotonic()
    await _create_pods(kube, w.for_scheduler(scheduler))
    pods = await watch_items(
        kube,
        "/api/v1/pods",
        lambda items: not unsettled(w, items),
        timeout=timeout,
        what=f"{scheduler}: pods settled",
        explain=lambda items: f"unsettled: {dict(list(unsettled(w, items).items())[:8])}",
    )
    seconds = time.monotonic() - t0
    impossible = set(w.impossible)

    def reported(events: dict[str, JSON]) -> bool:
        seen = {
            f"{e['involvedObject'].get('namespace', '')}/{e['involvedObject'].get('name', '')}"
            for e in events.values()
        }
        return impossible <= seen

    events = await watch_items(
        kube,
        "/api/v1/events",
        reported,
        query=[("fieldSelector", "reason=FailedScheduling")],
        timeout=60,
        what=f"{scheduler}: a FailedScheduling Event for each impossible pod",
    )
    latest: dict[str, tuple[str, str]] = {}
    for e in events.values():
        obj = e["involvedObject"]
        key = f"{obj.get('namespace', '')}/{obj.get('name', '')}"
        when = str(
            (e.get("series") or {}).get("lastObservedTime")
            or e.get("lastTimestamp")
            or e.get("eventTime")
            or ""
        )
        if key in impossible and (key not in latest or when >= latest[key][0]):
            latest[key] = (when, str(e.get("message", "")))
    nodes = (await kube.get("/api/v1/nodes"))["items"]
    claims = (await kube.get("/api/v1/persistentvolumeclaims"))["items"]
    volumes = (await kube.get("/api/v1/persistentvolumes"))["items"]
    outcome = diffcheck.Outcome(
        nodes=nodes,
        pods=[p for k, p in pods.items() if k.split("/")[0] in w.namespaces],
        claims={diffcheck.pod_key(c): c for c in claims},
        volumes={v["metadata"]["name"]: v for v in volumes},
        namespaces=dict(w.namespaces),
    )
    return Result(scheduler, outcome, {k: m for k, (_w, m) in latest.items()}, seconds)


def judged(pod: Mapping[str, Any]) -> bool:
    """The pods a scheduler placed (anchors were created bound)."""
    return PREBOUND not in diffcheck.labels_of(pod)

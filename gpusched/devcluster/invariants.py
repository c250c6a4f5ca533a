"""The fault suite's judge: what must hold in the API after any run, whatever failed.

Recomputed from the API objects alone (never from the scheduler's memory), so a scheduler
that believes something false is caught:

* **each pod bound at most once**: once a pod shows a node, its node and its card
  assignment (gpusched.io/gpu-ids, gpu-milli-assigned) never change (`BindingLog`, fed by
  a watch for the whole run: the final state alone cannot show a rewrite);
* **no card over 1000 milli**: per node and card, the shared pods' gpu-milli-assigned plus
  1000 for every whole-card pod is at most 1000;
* **no card charged to two whole-card pods** (said apart from the sum, for the report);
* **assignments well formed**: a bound GPU pod placed by us names as many cards as it asks
  (one for a shared pod), each within its node's cards;
* **node capacity**: CPU, memory and pod count of the bound pods within allocatable;
* **every pod that fits is bound**: the pods the caller says must end bound are.

Pods that are finished (Succeeded, Failed) hold nothing and are skipped, as the scheduler
skips them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpusched.model import keys
from gpusched.model.node import TopologyKeys, node_from_k8s
from gpusched.model.pod import parse_gpu_ids, pod_from_k8s

JSON = dict[str, Any]
FULL = 1000


def _assignment(raw: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = raw.get("metadata") or {}
    ann = meta.get("annotations") or {}
    node = str((raw.get("spec") or {}).get("nodeName") or "")
    return node, str(ann.get(keys.GPU_IDS, "")), str(ann.get(keys.GPU_MILLI_ASSIGNED, ""))


@dataclass
class BindingLog:
    """Every version of every pod a watch delivered: a bound pod whose node or cards
    change later was bound twice (or had its running cards rewritten)."""

    first: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # uid -> assignment
    names: dict[str, str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def see(self, raw: Mapping[str, Any]) -> None:
        meta = raw.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        now = _assignment(raw)
        if not uid or not now[0]:
            return
        self.names[uid] = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        before = self.first.setdefault(uid, now)
        if before != now:
            self.violations.append(
                f"pod {self.names[uid]} was bound as {before} and later shows {now}"
            )


def check(
    pods: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    *,
    must_bind: Collection[str] = (),
    log: BindingLog | None = None,
    topo: TopologyKeys | None = None,
) -> list[str]:
    """Every invariant violated by these API objects (empty: all hold). `must_bind`:
    names ("namespace/name") of pods that must end bound."""
    out: list[str] = list(log.violations) if log is not None else []
    topo = topo or TopologyKeys()
    by_node = {str(n["metadata"]["name"]): node_from_k8s(dict(n), topo) for n in nodes}
    milli: dict[tuple[str, int], int] = defaultdict(int)
    whole: dict[tuple[str, int], list[str]] = defaultdict(list)
    used: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    bound: set[str] = set()
    for raw in pods:
        pod = pod_from_k8s(dict(raw))
        if pod.terminal or not pod.node_name:
            continue
        bound.add(pod.key)
        req = pod.request
        u = used[pod.node_name]
        u[0] += req.cpu_milli
        u[1] += req.memory_bytes
        u[2] += 1
        node = by_node.get(pod.node_name)
        ann = pod.annotations
        raw_ids = ann.get(keys.GPU_IDS)
        if raw_ids is None:
            continue  # not placed on cards by gpusched (another scheduler's pod)
        try:
            ids = parse_gpu_ids(str(raw_ids))
        except ValueError as exc:
            out.append(f"pod {pod.key}: {keys.GPU_IDS}={raw_ids!r} is malformed: {exc}")
            continue
        cards = node.gpu_count if node is not None else 0
        bad = [i for i in ids if i >= cards]
        if bad:
            out.append(f"pod {pod.key}: cards {bad} beyond the {cards} of {pod.node_name}")
        want = req.gpu_cards or (1 if req.gpu_milli else 0)
        if len(ids) != want:
            out.append(f"pod {pod.key}: asks for {want} card(s), assigned {list(ids)}")
        for i in ids:
            key = (pod.node_name, i)
            if req.gpu_cards:
                whole[key].append(pod.key)
                milli[key] += FULL
            else:
                assigned = str(ann.get(keys.GPU_MILLI_ASSIGNED, req.gpu_milli))
                milli[key] += int(assigned) if assigned.isascii() and assigned.isdigit() else FULL
    for (node_name, card), total in sorted(milli.items()):
        owners = whole.get((node_name, card), [])
        if len(owners) > 1:
            out.append(f"{node_name} card {card} held whole by {len(owners)} pods: {owners}")
        elif total > FULL:
            out.append(f"{node_name} card {card} charged {total} milli (> {FULL})")
    for node_name, (cpu, mem, count) in sorted(used.items()):
        node = by_node.get(node_name)
        if node is None:
            continue  # the node is gone; its pods are the garbage collector's
        if cpu > node.cpu_milli or mem > node.memory_bytes or count > node.pods:
            out.append(
                f"{node_name} over capacity: cpu {cpu}/{node.cpu_milli} m,"
                f" memory {mem}/{node.memory_bytes}, pods {count}/{node.pods}"
            )
    missing = sorted(set(must_bind) - bound)
    if missing:
        out.append(f"{len(missing)} pod(s) that fit were never bound: {missing[:10]}")
    return out

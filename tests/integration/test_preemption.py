"""Issue 14's preemption acceptance on the real local control plane: the daemon (default
`ai-scheduler` profile, so the Preemption plugin) runs as the shipped ServiceAccount on a
private pool of KWOK nodes of 8 A100s each; every node is full of low-priority pods, and a
high-priority preemptor must make room.

Each test builds the answer in: victims' lost work is set through the pod's start
(`status.startTime`, patched once KWOK has started the pod, as an admin) and
`gpusched.io/last-checkpoint-time`, so a node whose pods checkpointed a minute ago is cheap
to preempt and a node whose pod never checkpointed in two hours is dear, whatever the
number of victims (kube-scheduler's DefaultPreemption, which counts victims, would choose
the other way in test 1).

What is asserted is what the API shows: the victims' DisruptionTarget condition and
Preempted Events, their deletion, the preemptor's nominatedNodeName and node; over the
whole test (a watch keeps every version of every pod), so "never chosen" means no version
of the pod ever carried the condition. "Nothing evicted" is also read from the plugin's
own counters in the in-process daemon once the preemptor's FailedScheduling Event shows
the attempt (and so its PostFilter) is over.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpusched.daemon import Daemon
from gpusched.devcluster import LocalCluster
from gpusched.devcluster.cluster import write_kubeconfig
from gpusched.devcluster.testkit import wait_until_allowed
from gpusched.kube import JSON, ApiError, Kube, pod_path
from gpusched.model import keys
from gpusched.model.pod import PodInfo, pod_from_k8s
from tests.integration.daemon_support import (
    RBAC,
    apply_docs,
    create_pods,
    daemon_settings,
    node_pool,
    pool_name,
    pool_node,
    pool_specs,
    running_daemon,
    sa_token,
)
from tests.integration.test_gangs import (
    Tracker,
    delete_pods,
    events_about,
    gpu_pod,
    log_tail,
    tracking,
    x_pod_group,
)

pytestmark = pytest.mark.integration

A100 = ((8, "A100M80", 96_000, 1_048_576, 8),)
LOW, HIGH = "gpusched-test-low", "gpusched-test-high"
PRIORITIES = {LOW: 100, HIGH: 100_000}
X_API = "/apis/scheduling.x-k8s.io/v1alpha1"
PDB_API = "/apis/policy/v1"
HOURS = 3600.0


# -- the cluster ---------------------------------------------------------------------------


async def priority_classes(kube: Kube) -> None:
    for name, value in PRIORITIES.items():
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        try:
            await kube.post("/apis/scheduling.k8s.io/v1/priorityclasses", body)
        except ApiError as exc:
            if exc.status != 409:  # the session's cluster has them from an earlier test
                raise


async def shipped_kubeconfig(kube: Kube, cluster: LocalCluster, tmp_path: Path, ns: str) -> Path:
    """A kubeconfig of the shipped ServiceAccount, once its preemption rights hold."""
    docs = list(yaml.safe_load_all(RBAC.read_text()))
    await apply_docs(kube, docs)
    account = next(d["metadata"] for d in docs if d["kind"] == "ServiceAccount")
    user = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    await wait_until_allowed(kube, user, "watch", "poddisruptionbudgets", group="policy")
    await wait_until_allowed(kube, user, "delete", "pods", namespace=ns)
    await wait_until_allowed(kube, user, "patch", "pods", subresource="status", namespace=ns)
    await wait_until_allowed(kube, user, "create", "pods", subresource="binding", namespace=ns)
    path = tmp_path / "gpusched.kubeconfig"
    token = await sa_token(kube, account["namespace"], account["name"])
    write_kubeconfig(path, cluster.server, cluster.ca_file, token, "gpusched")
    return path


@dataclass
class Scene:
    kube: Kube
    namespace: str
    pool: str
    nodes: list[str]
    daemon: Daemon
    stream: io.StringIO
    pods: Tracker
    events: Tracker

    @property
    def plugin(self) -> Any:
        return self.daemon.frameworks[keys.SCHEDULER_NAME].plugins["Preemption"]


@asynccontextmanager
async def scene(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path, nodes: int
) -> AsyncIterator[Scene]:
    """`nodes` empty 8-GPU nodes of a private pool, the daemon leading as the shipped
    ServiceAccount, and trackers of the namespace's pods and Events."""
    await priority_classes(kube)
    kubeconfig = await shipped_kubeconfig(kube, cluster, tmp_path, namespace)
    pool = pool_name()
    specs = pool_specs(pool, nodes, A100)
    stream = io.StringIO()
    async with (
        node_pool(kube, [pool_node(s, pool) for s in specs]),
        # The shipped Role allows the Lease kube-system/gpusched only.
        running_daemon(kubeconfig, stream, daemon_settings("gpusched")) as daemon,
        tracking(kube, pod_path(namespace)) as pods,
        tracking(kube, f"/api/v1/namespaces/{namespace}/events") as events,
    ):
        yield Scene(kube, namespace, pool, [s.name for s in specs], daemon, stream, pods, events)


# -- pods ----------------------------------------------------------------------------------


def rfc3339(seconds_ago: float) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    s: Scene,
    name: str,
    *,
    priority: str = LOW,
    gpus: int = 8,
    node: str = "",
    checkpointed_ago: float | None = None,
    preemptible: bool = True,
    labels: dict[str, str] | None = None,
    pod_group: str | None = None,
) -> JSON:
    annotations = {}
    if checkpointed_ago is not None:
        annotations[keys.LAST_CHECKPOINT] = rfc3339(checkpointed_ago)
    if not preemptible:
        annotations[keys.PREEMPTIBLE] = "false"
    raw = gpu_pod(
        name,
        s.pool,
        gpus=gpus,
        node=node,
        labels=labels,
        annotations=annotations,
        pod_group=pod_group,
    )
    raw["spec"]["priorityClassName"] = priority
    return raw


def is_running(raw: JSON) -> bool:
    status = raw.get("status") or {}
    return bool(raw.get("spec", {}).get("nodeName")) and status.get("phase") == "Running"


async def running_victims(s: Scene, victims: list[JSON], started_ago: float = 2 * HOURS) -> None:
    """Create the victims, wait until each runs on its node, then move their start
    `started_ago` back (what KWOK wrote is now; an admin may patch pods/status)."""
    await create_pods(s.kube, s.namespace, victims)
    names = [v["metadata"]["name"] for v in victims]
    await s.pods.until(
        lambda: all(is_running(s.pods.items.get(n, {})) for n in names),
        f"victims {names} running",
        lambda: log_tail(s.stream, s.namespace),
    )
    start = rfc3339(started_ago)
    for n in names:
        await s.kube.merge_patch(
            pod_path(s.namespace, n) + "/status", {"status": {"startTime": start}}
        )
    await s.pods.until(
        lambda: all(s.pods.items[n]["status"].get("startTime") == start for n in names),
        "the start times moved back",
    )


def node_of(s: Scene, name: str) -> str:
    return str(s.pods.items.get(name, {}).get("spec", {}).get("nodeName") or "")


def disruption_targets(s: Scene, name: str) -> list[JSON]:
    """Every DisruptionTarget condition any version of the pod carried."""
    return [
        c
        for status in s.pods.history.get(name, [])
        for c in status.get("conditions") or []
        if c.get("type") == "DisruptionTarget"
    ]


def nominations(s: Scene, name: str) -> list[str]:
    history = s.pods.history.get(name, [])
    return [st["nominatedNodeName"] for st in history if st.get("nominatedNodeName")]


async def preempted(
    s: Scene, victims: Iterable[str], preemptors: Iterable[PodInfo], node: str = ""
) -> None:
    """Each victim was preempted as kube-scheduler does it: the condition, the deletion,
    the Event naming the preemptor (one of a gang's members) and the node the preemption
    was for (`node`; by default one the preemptor was nominated to or bound to)."""
    victims = list(victims)
    expected = {
        f"Preempted by pod {p.uid} on node {where}"
        for p in preemptors
        for where in ([node] if node else [node_of(s, p.name), *nominations(s, p.name)])
    }
    await s.pods.until(
        lambda: not any(v in s.pods.items for v in victims),
        f"victims {victims} deleted",
        lambda: log_tail(s.stream, s.namespace),
    )
    await s.events.until(
        lambda: all(events_about(s.events, v, "Preempted") for v in victims),
        f"a Preempted Event on each of {victims}",
    )
    for v in victims:
        conditions = disruption_targets(s, v)
        assert conditions, f"{v} was deleted without a DisruptionTarget condition"
        reasons = {(c["status"], c["reason"]) for c in conditions}
        assert reasons == {("True", "PreemptionByScheduler")}, conditions
        [event] = events_about(s.events, v, "Preempted")
        assert event["message"] in expected, (event["message"], expected)
        assert event["type"] == "Normal" and event["reportingComponent"] == "gpusched"


def untouched(s: Scene, names: Iterable[str]) -> None:
    """Never marked, never deleted, no Preempted Event."""
    for n in names:
        assert n in s.pods.items, f"{n} was deleted"
        assert not disruption_targets(s, n), f"{n} was marked for preemption"
        assert not events_about(s.events, n, "Preempted"), f"{n} has a Preempted Event"


async def bound_where_nominated(s: Scene, name: str) -> str:
    """The preemptor is nominated, then binds to the node it was nominated to (kube's
    evaluateNominatedNode: also when the preemption freed several nodes, a gang victim's)."""
    await s.pods.until(
        lambda: bool(node_of(s, name)), f"{name} bound", lambda: log_tail(s.stream, s.namespace)
    )
    node, nominated = node_of(s, name), nominations(s, name)
    assert nominated, f"{name} was bound without a nomination"
    assert node == nominated[0], (nominated, node)
    return node


async def failed_attempt(s: Scene, name: str) -> None:
    """Wait for the pod's FailedScheduling Event: its attempt, PostFilter included, is
    over (the Event is written after PostFilter)."""
    await s.events.until(
        lambda: bool(events_about(s.events, name)),
        f"a FailedScheduling Event for {name}",
        lambda: log_tail(s.stream, s.namespace),
    )


async def create(s: Scene, raw: JSON) -> PodInfo:
    return pod_from_k8s(await s.kube.post(pod_path(s.namespace), raw))


async def budget_seen(
    s: Scene, name: str, selector: JSON, min_available: int, member: str, allowed: int
) -> None:
    """A PodDisruptionBudget, waited for until the daemon's own port sees the disruption
    controller's count for it on `member` (the daemon's PDB watch is a stream of its own)."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"selector": selector, "minAvailable": min_available},
    }
    await s.kube.post(f"{PDB_API}/namespaces/{s.namespace}/poddisruptionbudgets", body)
    port = s.daemon.disruption
    assert port is not None, "the daemon watches no PodDisruptionBudgets"
    target = pod_from_k8s(s.pods.items[member])
    changed = asyncio.Condition()
    previous: Callable[[], None] = port.on_change

    def heard() -> None:
        previous()

        async def notify() -> None:
            async with changed:
                changed.notify_all()

        asyncio.get_running_loop().create_task(notify())

    def counted() -> bool:
        return any(
            (b.key, b.disruptions_allowed, b.problem) == (f"{s.namespace}/{name}", allowed, "")
            for b in port.budgets_of(target)
        )

    port.on_change = heard
    try:
        async with asyncio.timeout(30), changed:
            await changed.wait_for(counted)
    finally:
        port.on_change = previous


# -- (a) the least GPU-hours lost ----------------------------------------------------------


async def test_the_preemptor_takes_the_node_whose_victims_lose_the_fewest_gpu_hours(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    async with scene(cluster, kube, namespace, tmp_path, nodes=2) as s:
        cheap, dear = s.nodes
        # cheap: two 4-GPU pods that checkpointed a minute ago: 2 x 4 x 1/60 = 0.13 GPU-h.
        # dear: one 8-GPU pod that never checkpointed in 2 h: 16 GPU-h. Fewest victims
        # (kube's rule) would take `dear`.
        await running_victims(
            s,
            [
                pod(s, "fresh-0", gpus=4, node=cheap, checkpointed_ago=60),
                pod(s, "fresh-1", gpus=4, node=cheap, checkpointed_ago=60),
                pod(s, "stale", node=dear),
            ],
        )
        big = await create(s, pod(s, "big", priority=HIGH))
        node = await bound_where_nominated(s, "big")
        assert node == cheap
        await preempted(s, ["fresh-0", "fresh-1"], [big], cheap)
        untouched(s, ["stale"])
        assert s.plugin.victims == 2


# -- (b) budgets and opt-outs are never chosen ----------------------------------------------


async def test_a_pdb_protected_or_non_preemptible_pod_is_never_chosen_even_when_cheaper(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    async with scene(cluster, kube, namespace, tmp_path, nodes=3) as s:
        guarded, opted_out, dear = s.nodes
        await running_victims(
            s,
            [
                pod(s, "guarded", node=guarded, checkpointed_ago=60, labels={"app": "guarded"}),
                pod(s, "opted-out", node=opted_out, checkpointed_ago=60, preemptible=False),
                pod(s, "stale", node=dear),
            ],
        )
        # minAvailable 1 of the 1 healthy pod: no disruption allowed.
        await budget_seen(s, "guard", {"matchLabels": {"app": "guarded"}}, 1, "guarded", 0)
        big = await create(s, pod(s, "big", priority=HIGH))
        assert await bound_where_nominated(s, "big") == dear
        await preempted(s, ["stale"], [big], dear)
        untouched(s, ["guarded", "opted-out"])

        # Now the protected pods are the only lower-priority ones left: nobody is evicted
        # and the second preemptor stays pending.
        before = (s.plugin.preemptions, s.plugin.victims)
        await create(s, pod(s, "big-2", priority=HIGH))
        await failed_attempt(s, "big-2")
        assert (s.plugin.preemptions, s.plugin.victims) == before
        assert not node_of(s, "big-2") and not nominations(s, "big-2")
        untouched(s, ["guarded", "opted-out", "big"])


# -- (c) a gang victim goes whole or not at all ---------------------------------------------


async def gang_beside_single(s: Scene, dear: str, keep: dict[str, str] | None = None) -> None:
    """`single` (8 GPUs, never checkpointed) on `dear`, then the two-pod gang `team` (8 GPUs
    each, checkpointed a minute ago) on the two other nodes, `team-1` labelled `keep`. The
    gang's members are not pinned to nodes: a gang's members share one placement rule."""
    await running_victims(s, [pod(s, "single", node=dear)])
    await s.kube.post(f"{X_API}/namespaces/{s.namespace}/podgroups", x_pod_group("team", 2, 60))
    await running_victims(
        s,
        [
            pod(s, "team-0", checkpointed_ago=60, pod_group="team"),
            pod(s, "team-1", checkpointed_ago=60, pod_group="team", labels=keep),
        ],
    )


async def test_a_gang_victim_is_evicted_whole(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    async with scene(cluster, kube, namespace, tmp_path, nodes=3) as s:
        dear = s.nodes[2]
        # The gang: 2 x 8 GPUs, checkpointed a minute ago (0.27 GPU-h for both); the single
        # never checkpointed (16 GPU-h). The preemptor needs one node, and takes the gang's
        # two: evicting one member loses the whole job anyway.
        await gang_beside_single(s, dear)
        big = await create(s, pod(s, "big", priority=HIGH))
        # Both of the gang's nodes are freed; the preemptor takes the one it was nominated to.
        await bound_where_nominated(s, "big")
        # The Events name the node the preemption was for: the nominated one.
        await preempted(s, ["team-0", "team-1"], [big], nominations(s, "big")[0])
        untouched(s, ["single"])


async def test_a_gang_with_a_protected_member_is_not_evicted_at_all(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    async with scene(cluster, kube, namespace, tmp_path, nodes=3) as s:
        dear = s.nodes[2]
        await gang_beside_single(s, dear, keep={"keep": "yes"})
        # Only team-1 is covered; team-0 alone is evictable, but not without its sibling.
        await budget_seen(s, "keep", {"matchLabels": {"keep": "yes"}}, 1, "team-1", 0)
        big = await create(s, pod(s, "big", priority=HIGH))
        assert await bound_where_nominated(s, "big") == dear
        await preempted(s, ["single"], [big], dear)
        untouched(s, ["team-0", "team-1"])


# -- (d) a gang preemptor evicts for all its members or for none ----------------------------


async def test_a_gang_preemptor_never_causes_a_partial_eviction(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    async with scene(cluster, kube, namespace, tmp_path, nodes=3) as s:
        a, b, c = s.nodes
        await running_victims(
            s,
            [
                pod(s, "low-a", node=a),
                pod(s, "low-b", node=b),
                pod(s, "kept", node=c, preemptible=False),
            ],
        )
        # Three 8-GPU members: room can be made on a and b only (c's pod opted out).
        await kube.post(f"{X_API}/namespaces/{namespace}/podgroups", x_pod_group("trio", 3, 120))
        members = [f"trio-{i}" for i in range(3)]
        made = [await create(s, pod(s, m, priority=HIGH, pod_group="trio")) for m in members]
        for m in members:
            await failed_attempt(s, m)
        assert (s.plugin.preemptions, s.plugin.victims) == (0, 0)
        assert not any(nominations(s, m) for m in members)
        untouched(s, ["low-a", "low-b", "kept"])

        # With c's pod gone, room for the whole gang can be made: both others go, and the
        # three members run on the three nodes.
        await delete_pods(kube, namespace, ["kept"])
        await s.pods.until(
            lambda: all(node_of(s, m) for m in members),
            "the whole gang bound",
            lambda: log_tail(s.stream, s.namespace),
        )
        assert sorted(node_of(s, m) for m in members) == sorted(s.nodes)
        await preempted(s, ["low-a", "low-b"], made)

"""The disruption port against the real control plane (kube/disruption.py), alone: no
scheduler. With the shipped ServiceAccount's rights it reads PodDisruptionBudgets whose
`disruptionsAllowed` kube-controller-manager's disruption controller computes, and writes
an eviction as kube-scheduler does (the DisruptionTarget condition, the deletion, the
Preempted Event) and a preemptor's nominatedNodeName.

The pods run on a KWOK node of their own (spec.nodeName set directly: no scheduler is
involved), so KWOK makes them Ready and the disruption controller counts them healthy.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import yaml

from gpusched.devcluster import LocalCluster
from gpusched.devcluster.cluster import write_kubeconfig
from gpusched.devcluster.testkit import pod_manifest, wait_until_allowed
from gpusched.framework.disruption import Budget
from gpusched.kube import JSON, Kube, pod_path, wait_for_deletion
from gpusched.kube.disruption import KubeDisruption
from gpusched.kube.writer import ClusterWriter
from gpusched.model.pod import PodInfo, pod_from_k8s
from tests.integration.daemon_support import (
    RBAC,
    apply_docs,
    node_pool,
    placement,
    pool_name,
    pool_node,
    pool_specs,
    sa_token,
)
from tests.integration.test_gangs import Tracker, events_about, tracking

pytestmark = pytest.mark.integration

NOT_RUNNING = "nobody-schedules-this"
PDB_API = "/apis/policy/v1"


async def shipped_kube(kube: Kube, cluster: LocalCluster, tmp_path: Path, ns: str) -> Kube:
    """A client acting as the shipped ServiceAccount, once its preemption rights hold."""
    docs = list(yaml.safe_load_all(RBAC.read_text()))
    await apply_docs(kube, docs)
    account = next(d["metadata"] for d in docs if d["kind"] == "ServiceAccount")
    user = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    await wait_until_allowed(kube, user, "watch", "poddisruptionbudgets", group="policy")
    await wait_until_allowed(kube, user, "delete", "pods", namespace=ns)
    await wait_until_allowed(kube, user, "patch", "pods", subresource="status", namespace=ns)
    path = tmp_path / "gpusched.kubeconfig"
    token = await sa_token(kube, account["namespace"], account["name"])
    write_kubeconfig(path, cluster.server, cluster.ca_file, token, "gpusched")
    return await Kube.connect(path)


class Watched:
    """A running KubeDisruption and a way to wait on its own change reports."""

    def __init__(self, kube: Kube) -> None:
        self.changed = asyncio.Condition()
        self.port = KubeDisruption(kube, ClusterWriter(kube), on_change=self._on_change)

    def _on_change(self) -> None:
        async def notify() -> None:
            async with self.changed:
                self.changed.notify_all()

        asyncio.get_running_loop().create_task(notify())

    async def until(self, check: Callable[[], bool], what: str, timeout: float = 30) -> None:  # noqa: ASYNC109
        try:
            async with asyncio.timeout(timeout), self.changed:
                await self.changed.wait_for(check)
        except TimeoutError:
            known = {
                f"{ns}/{name}": (b.disruptions_allowed, b.resource_version, b.problem)
                for ns, held in self.port.namespaces.items()
                for name, b in held.budgets.items()
            }
            raise AssertionError(
                f"the port never saw {what}; budgets {known}, pending {self.port.pending}"
            ) from None


@asynccontextmanager
async def running(kube: Kube) -> AsyncIterator[Watched]:
    watched = Watched(kube)
    task = asyncio.create_task(watched.port.run())
    try:
        await asyncio.wait_for(watched.port.wait_synced(), 30)
        yield watched
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def running_pod(name: str, node: str, pool: str, labels: dict[str, str]) -> JSON:
    pod = pod_manifest(name, scheduler_name=NOT_RUNNING, labels=labels)
    pod["spec"]["nodeName"] = node
    pod["spec"]["tolerations"] = placement(pool)["tolerations"]
    return pod


def budget(name: str, selector: JSON, min_available: int) -> JSON:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"selector": selector, "minAvailable": min_available},
    }


def allowed(budgets: list[Budget] | tuple[Budget, ...]) -> dict[str, int]:
    return {b.key.split("/")[1]: b.disruptions_allowed for b in budgets}


def ready(pod: JSON) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def conditions_seen(pods: Tracker, name: str, kind: str) -> list[JSON]:
    return [
        c
        for status in pods.history.get(name, [])
        for c in status.get("conditions") or []
        if c.get("type") == kind
    ]


async def test_budgets_and_an_eviction_with_the_shipped_rights(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    pool = pool_name()
    node = f"{pool}-000"
    [spec] = pool_specs(pool, 1)
    sa = await shipped_kube(kube, cluster, tmp_path, ns)
    async with (
        sa,
        node_pool(kube, [pool_node(spec, pool)]),
        tracking(kube, pod_path(ns)) as pods,
        tracking(kube, f"/api/v1/namespaces/{ns}/events") as events,
        running(sa) as w,
    ):
        port = w.port
        names = ["train-0", "train-1", "train-2"]
        made: dict[str, PodInfo] = {}
        for name in names:
            raw = await kube.post(pod_path(ns), running_pod(name, node, pool, {"app": "train"}))
            made[name] = pod_from_k8s(raw)
        await pods.until(lambda: all(ready(pods.items.get(n, {})) for n in names), "pods Ready")
        # minAvailable 2 of 3 healthy: one disruption allowed. `{}` (minAvailable 0) covers
        # every pod of the namespace (policy/v1), so all three healthy pods may go.
        budgets = f"{PDB_API}/namespaces/{ns}/poddisruptionbudgets"
        await kube.post(budgets, budget("train", {"matchLabels": {"app": "train"}}, 2))
        await kube.post(budgets, budget("all", {}, 0))
        victim = made["train-0"]
        await w.until(
            lambda: allowed(port.budgets_of(victim)) == {"train": 1, "all": 3},
            "the disruption controller's counts",
        )
        serve = pod_manifest("other", scheduler_name=NOT_RUNNING, labels={"app": "serve"})
        other = pod_from_k8s(await kube.post(pod_path(ns), serve))
        assert allowed(port.budgets_of(other)) == {"all": 3}

        preemptor = pod_from_k8s(
            await kube.post(pod_path(ns), pod_manifest("big", scheduler_name=NOT_RUNNING))
        )
        st = await port.evict(victim, preemptor=preemptor, node=node, message="")
        assert st.is_success(), st
        # Counted against the budget at once, before the controller has seen the deletion.
        assert allowed(port.budgets_of(made["train-1"]))["train"] == 0
        await pods.until(lambda: "train-0" not in pods.items, "the victim deleted")
        seen = conditions_seen(pods, "train-0", "DisruptionTarget")
        assert seen, pods.history.get("train-0")
        cond = seen[-1]
        assert cond["status"] == "True" and cond["reason"] == "PreemptionByScheduler"
        assert cond["message"] == f"{NOT_RUNNING}: preempting to accommodate a higher priority pod"
        await events.until(lambda: bool(events_about(events, "train-0", "Preempted")), "the Event")
        [event] = events_about(events, "train-0", "Preempted")
        assert event["type"] == "Normal" and event["action"] == "Preempting"
        assert event["message"] == f"Preempted by pod {preemptor.uid} on node {node}"
        assert event["related"]["uid"] == preemptor.uid
        assert event["reportingComponent"] == "gpusched"
        # The controller's own count follows, and our pending eviction is dropped for the
        # budget it recounted. Only for one of them: the disruption controller requeues
        # just the first budget of a pod that has several (getPdbForPod), so the other
        # stays stale until recounted for another reason, and the port's subtraction is
        # what keeps it right. Either way the totals are: 2 healthy of minAvailable 2,
        # and 2 healthy of minAvailable 0.
        await w.until(
            lambda: (
                len(port.pending) < 2
                and allowed(port.budgets_of(made["train-1"])) == {"train": 0, "all": 2}
            ),
            "the controller's count after the eviction",
        )

        # Nominate, then clear.
        assert (await port.nominate(preemptor, node)).is_success()
        got = await kube.get(pod_path(ns, "big"))
        assert got["status"]["nominatedNodeName"] == node
        assert (await port.nominate(preemptor, "")).is_success()
        got = await kube.get(pod_path(ns, "big"))
        assert "nominatedNodeName" not in got["status"]


async def test_a_pod_re_created_under_the_victims_name_is_not_touched(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    sa = await shipped_kube(kube, cluster, tmp_path, ns)
    async with sa, running(sa) as w:
        first = pod_from_k8s(
            await kube.post(pod_path(ns), pod_manifest("job", scheduler_name=NOT_RUNNING))
        )
        # An unbound pod is removed at once, whatever the grace period.
        await kube.delete(pod_path(ns, "job"), query=[("gracePeriodSeconds", "0")])
        await wait_for_deletion(kube, pod_path(ns), "job")
        second = pod_from_k8s(
            await kube.post(pod_path(ns), pod_manifest("job", scheduler_name=NOT_RUNNING))
        )
        assert second.uid != first.uid
        st = await w.port.evict(first, preemptor=second, node="n", message="m")
        assert st.is_success(), st  # the victim is gone: nothing left to preempt
        now = await kube.get(pod_path(ns, "job"))
        assert now["metadata"]["uid"] == second.uid
        assert "deletionTimestamp" not in now["metadata"]
        assert not [
            c for c in now["status"].get("conditions") or [] if c["type"] == "DisruptionTarget"
        ]
        # Nominating the old pod fails as "gone" and leaves the new one alone.
        st = await w.port.nominate(first, "n")
        assert not st.is_success() and "no longer exists" in st.message()
        now = await kube.get(pod_path(ns, "job"))
        assert "nominatedNodeName" not in now["status"]

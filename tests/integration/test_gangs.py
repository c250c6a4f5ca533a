"""Issue 12's acceptance on the real local control plane: gangs of all three APIs placed
all-or-nothing by gpusched's GangScheduling plugin (the default `ai-scheduler` profile).

Each test has a private pool of KWOK nodes (8 x A100 each) in racks of
`topology.gpusched.io/rack`, four racks a spine, and a daemon of its own (its Lease
private). What is asserted is what the API shows: pods' nodeName, Events, PodGroup
status; the daemon's in-process gang board (what its status operator reads) is watched
only to know when members sit at Permit, which the API cannot show.

Every wait is on a watch: one `Tracker` per collection lists and then watches for the
whole test, keeps the objects, the first moment each pod was seen bound and each
PodGroup's status history, and re-checks a waiter's condition on each change. So "no pod
of this gang was ever bound" is checked over the whole test, not at one instant.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import aclosing, asynccontextmanager
from typing import Any

import orjson
import pytest

from gpusched.daemon import Daemon
from gpusched.devcluster import LocalCluster, NodeSpec
from gpusched.devcluster.cluster import WORKLOAD_API
from gpusched.devcluster.testkit import pod_manifest
from gpusched.kube import JSON, ApiError, Kube, pod_path
from gpusched.model import keys
from gpusched.model.pod import GangAPI
from gpusched.operator.board import GangReport
from tests.integration.daemon_support import (
    create_pods,
    daemon_settings,
    node_pool,
    placement,
    pool_name,
    pool_node,
    running_daemon,
)
from tests.integration.test_controllers import JOBS

pytestmark = pytest.mark.integration

X_API = "/apis/scheduling.x-k8s.io/v1alpha1"
W_API = f"/apis/{WORKLOAD_API}"
RACKS = 8
RACKS_PER_SPINE = 4
CARDS = 8
HOLD_GATE = "gpusched.io/test-hold"


# -- topology ------------------------------------------------------------------------------


def topology(pool: str, per_rack: int, racks: int = RACKS) -> list[NodeSpec]:
    """`racks` racks of `per_rack` 8 x A100 nodes; racks 0-3 on spine 0, 4-7 on spine 1."""
    return [
        NodeSpec(
            name=f"{pool}-r{r}-n{i}",
            gpus=CARDS,
            model="A100M80",
            cpu_milli=96_000,
            memory_mib=1_048_576,
            rack=f"{pool}-rack-{r}",
            spine=f"{pool}-spine-{r // RACKS_PER_SPINE}",
            nvlink_island_size=CARDS,
        )
        for r in range(racks)
        for i in range(per_rack)
    ]


def rack_of(spec_by_node: dict[str, NodeSpec], node: str) -> str:
    return spec_by_node[node].rack


def fewest_domains(free: dict[str, int], spine_of: dict[str, str], need: int) -> tuple[int, int]:
    """The exhaustive answer: the fewest racks whose free whole nodes hold `need` pods, and
    among those choices the fewest spines (every subset of racks is tried)."""
    racks = sorted(free)
    for k in range(1, len(racks) + 1):
        spines = [
            len({spine_of[r] for r in subset})
            for subset in itertools.combinations(racks, k)
            if sum(free[r] for r in subset) >= need
        ]
        if spines:
            return k, min(spines)
    raise AssertionError(f"{need} pods do not fit in {free}")


# -- pods ----------------------------------------------------------------------------------


def gpu_pod(
    name: str,
    pool: str,
    *,
    gpus: int = CARDS,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    pod_group: str | None = None,
    node: str = "",
    gated: bool = False,
) -> JSON:
    """A pod for gpusched in the pool; `node`: only that node (by hostname label)."""
    pod = pod_manifest(name, gpus=gpus, labels=labels, annotations=annotations, pod_group=pod_group)
    where = placement(pool)
    selector = dict(where["node_selector"])
    if node:
        selector["kubernetes.io/hostname"] = node
    pod["spec"].update(nodeSelector=selector, tolerations=where["tolerations"])
    if gated:
        pod["spec"]["schedulingGates"] = [{"name": HOLD_GATE}]
    return pod


def annotation_gang(name: str, pool: str, size: int) -> list[JSON]:
    gang = {keys.GANG_NAME: name, keys.GANG_TOTAL: str(size)}
    return [
        gpu_pod(f"{name}-{i}", pool, labels={"gang": name}, annotations=gang) for i in range(size)
    ]


def x_pod_group(name: str, min_member: int, timeout: int) -> JSON:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member, "scheduleTimeoutSeconds": timeout},
    }


def x_gang(name: str, pool: str, size: int) -> list[JSON]:
    return [
        gpu_pod(f"{name}-{i}", pool, labels={"gang": name}, pod_group=name) for i in range(size)
    ]


async def delete_pods(kube: Kube, namespace: str, names: Iterable[str]) -> None:
    """Delete at once (grace 0: KWOK runs no containers to stop)."""

    async def one(name: str) -> None:
        try:
            await kube.delete(pod_path(namespace, name), query=[("gracePeriodSeconds", "0")])
        except ApiError as exc:
            if exc.status != 404:
                raise

    await asyncio.gather(*(one(n) for n in names))


# -- watching ------------------------------------------------------------------------------


class Tracker:
    """The objects of one collection, kept by a list and then a watch for the whole test.

    `bound[pod]`: (monotonic time, node) when the pod was first seen with a nodeName, kept
    after the pod is deleted. `history[name]`: every distinct `status` seen, in order.
    `until(check)` returns once `check()` holds, re-checked after every change."""

    def __init__(self, kube: Kube, path: str) -> None:
        self.kube = kube
        self.path = path
        self.items: dict[str, JSON] = {}
        self.bound: dict[str, tuple[float, str]] = {}
        self.history: dict[str, list[JSON]] = {}
        self._changed = asyncio.Condition()
        self._listed = asyncio.Event()

    def _see(self, obj: JSON) -> None:
        name = obj["metadata"]["name"]
        self.items[name] = obj
        node = obj.get("spec", {}).get("nodeName")
        if node and name not in self.bound:
            self.bound[name] = (time.monotonic(), node)
        status = obj.get("status") or {}
        seen = self.history.setdefault(name, [])
        if not seen or seen[-1] != status:
            seen.append(status)

    async def run(self) -> None:
        while True:
            listing = await self.kube.get(self.path)
            self.items.clear()
            for obj in listing.get("items", []):
                self._see(obj)
            await self._notify()
            self._listed.set()
            version = str(listing["metadata"]["resourceVersion"])
            events = self.kube.watch(self.path, resource_version=version)
            async with aclosing(events):
                async for event in events:
                    if event.type == "ERROR":
                        break  # 410 Gone: list again
                    if event.type == "BOOKMARK":
                        continue
                    if event.type == "DELETED":
                        self.items.pop(event.object["metadata"]["name"], None)
                    else:
                        self._see(event.object)
                    await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def until(
        self,
        check: Callable[[], bool],
        what: str,
        explain: Callable[[], str] = lambda: "",
        timeout: float = 60.0,  # noqa: ASYNC109 - the failure names what was awaited
    ) -> None:
        async def wait() -> None:
            async with self._changed:
                await self._changed.wait_for(check)

        try:
            await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            raise AssertionError(f"not after {timeout:.0f}s: {what}\n{explain()}") from None

    # -- pods --

    def of(self, prefix: str) -> dict[str, JSON]:
        return {n: p for n, p in self.items.items() if n.startswith(prefix)}

    def nodes(self, names: Iterable[str]) -> dict[str, str]:
        """pod -> node, for the named pods bound now."""
        out = {}
        for n in names:
            node = self.items.get(n, {}).get("spec", {}).get("nodeName")
            if node:
                out[n] = node
        return out

    def ever_bound(self, names: Iterable[str]) -> dict[str, str]:
        return {n: self.bound[n][1] for n in names if n in self.bound}


@asynccontextmanager
async def tracking(kube: Kube, path: str) -> AsyncIterator[Tracker]:
    tracker = Tracker(kube, path)
    task = asyncio.create_task(tracker.run())
    try:
        await asyncio.wait_for(tracker._listed.wait(), 30)
        yield tracker
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def events_about(events: Tracker, name: str, reason: str = "FailedScheduling") -> list[JSON]:
    return [
        e
        for e in events.items.values()
        if e["involvedObject"].get("name") == name and e.get("reason") == reason
    ]


def decisions(stream: io.StringIO, namespace: str, prefix: str = "") -> list[dict[str, Any]]:
    """The daemon's decision records (one JSON line per attempt) for pods of `prefix`."""
    out = []
    for line in stream.getvalue().splitlines():
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if rec.get("event") == "decision" and str(rec.get("pod", "")).startswith(
            f"{namespace}/{prefix}"
        ):
            out.append(rec)
    return out


def _report(daemon: Daemon, api: GangAPI, key: str) -> GangReport | None:
    return daemon.gang_board.get(api, key) if daemon.gang_board is not None else None


def operator_tail(stream: io.StringIO, count: int = 15) -> str:
    """The daemon's last log lines that are not decision records (the status operator's,
    the watches'): what a missing status write is explained by."""
    lines = []
    for line in stream.getvalue().splitlines():
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if "attempt" not in record:
            lines.append(line)
    return "daemon log (last, not decisions):\n" + "\n".join(lines[-count:])


def log_tail(stream: io.StringIO, namespace: str, prefix: str = "", count: int = 12) -> str:
    brief = [
        {k: r.get(k) for k in ("pod", "attempt", "result", "node", "plugin", "message")}
        for r in decisions(stream, namespace, prefix)[-count:]
    ]
    return "decision log (last):\n" + "\n".join(orjson.dumps(b).decode() for b in brief)


async def board_until(
    daemon: Daemon,
    api: GangAPI,
    key: str,
    check: Callable[[GangReport], bool],
    timeout: float,  # noqa: ASYNC109 - the failure names the last report
) -> GangReport:
    """Wait (by subscription, no polling) until the daemon's report of the PodGroup holds."""
    board = daemon.gang_board
    assert board is not None
    hit = asyncio.Event()
    loop = asyncio.get_running_loop()

    def test() -> None:
        report = board.get(api, key)
        if report is not None and check(report):
            hit.set()

    def heard(_keys: frozenset[tuple[GangAPI, str]]) -> None:
        loop.call_soon_threadsafe(test)  # the board calls from the publisher's thread

    unsubscribe = board.subscribe(heard)
    try:
        test()
        await asyncio.wait_for(hit.wait(), timeout)
    except TimeoutError:
        raise AssertionError(f"{key}: last report {board.get(api, key)}") from None
    finally:
        unsubscribe()
    report = board.get(api, key)
    assert report is not None
    return report


@asynccontextmanager
async def gang_cluster(
    cluster: LocalCluster,
    kube: Kube,
    namespace: str,
    specs: list[NodeSpec],
    pool: str,
    settings: dict[str, Any] | None = None,
) -> AsyncIterator[tuple[Daemon, io.StringIO, Tracker, Tracker]]:
    """The pool's nodes, a running leader daemon, and trackers of the namespace's pods and
    Events. Beside the pool, a second one of 16 free nodes the tests' pods may not use
    (another pool's taint and label): free cards there are no capacity for a gang, so
    whatever else the session's cluster holds (the 100-node fleet of
    test_control_plane), these tests see the same answers."""
    stream = io.StringIO()
    elsewhere = pool_name()
    async with (
        node_pool(kube, [pool_node(s, elsewhere) for s in topology(elsewhere, per_rack=2)]),
        node_pool(kube, [pool_node(s, pool) for s in specs]),
        running_daemon(cluster.kubeconfig, stream, settings) as daemon,
        tracking(kube, pod_path(namespace)) as pods,
        tracking(kube, f"/api/v1/namespaces/{namespace}/events") as events,
    ):
        yield daemon, stream, pods, events


# -- 1. all or nothing, the fewest racks -------------------------------------------------


async def test_a_32_pod_gang_goes_all_or_nothing_into_the_fewest_racks(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    specs = topology(pool, per_rack=6)
    spec_by_node = {s.name: s for s in specs}
    spine_of = {s.rack: s.spine for s in specs}
    # Whole free nodes wanted per rack: 34 in all. A 32-pod gang then needs six racks (the
    # five full ones and rack 5); pod by pod it could land on all eight.
    wanted = [6, 6, 1, 6, 6, 2, 6, 1]
    async with gang_cluster(cluster, kube, namespace, specs, pool) as (_, stream, pods, events):
        fillers = []
        for r, keep in enumerate(wanted):
            rack = [s.name for s in specs if s.rack == f"{pool}-rack-{r}"]
            fillers += [gpu_pod(f"fill-{node}", pool, gpus=1, node=node) for node in rack[keep:]]
        await create_pods(kube, namespace, fillers)
        filler_names = [f["metadata"]["name"] for f in fillers]
        await pods.until(
            lambda: len(pods.nodes(filler_names)) == len(fillers),
            "the fillers bound",
            lambda: log_tail(stream, namespace, "fill-"),
        )
        # The exhaustive answer, from what the API shows: nodes no pod uses, per rack.
        used = {p["spec"]["nodeName"] for p in pods.items.values() if p["spec"].get("nodeName")}
        free = {s.rack: 0 for s in specs}
        for s in specs:
            free[s.rack] += s.name not in used
        assert sum(free.values()) == 34, free
        best_racks, best_spines = fewest_domains(free, spine_of, 32)
        assert (best_racks, best_spines) == (6, 2)

        # An over-size gang (35 > 34 free nodes) first: it cannot fit, so it must hold nothing.
        over = annotation_gang("over", pool, 35)
        over_names = [p["metadata"]["name"] for p in over]
        await create_pods(kube, namespace, over)
        await pods.until(
            lambda: all(_unschedulable(pods.items.get(n)) for n in over_names),
            "every pod of the over-size gang refused",
            lambda: log_tail(stream, namespace, "over-"),
        )
        refusal = _condition(pods.items[over_names[0]], "PodScheduled")["message"]
        assert "needs 35 more of its 35 pods placed together" in refusal, refusal
        assert "holds 34" in refusal, refusal

        # The 32-pod gang: placed whole, on 32 nodes, in the fewest racks, while the
        # over-size gang (older, so first in the queue) still waits with nothing.
        gang = annotation_gang("train", pool, 32)
        names = [p["metadata"]["name"] for p in gang]
        await create_pods(kube, namespace, gang)
        await pods.until(
            lambda: len(pods.nodes(names)) == 32,
            "the 32-pod gang bound",
            lambda: log_tail(stream, namespace, "train-"),
        )
        placed = pods.nodes(names)
        assert len(set(placed.values())) == 32
        assert not set(placed.values()) & used
        racks = {rack_of(spec_by_node, n) for n in placed.values()}
        assert len(racks) == best_racks, sorted(racks)
        assert len({spine_of[r] for r in racks}) == best_spines
        # A probe gang needing exactly the two nodes left: it runs; the over-size gang
        # still has no pod bound and so held none of the 34 nodes the others took.
        probe = annotation_gang("probe", pool, 2)
        probe_names = [p["metadata"]["name"] for p in probe]
        await create_pods(kube, namespace, probe)
        await pods.until(
            lambda: len(pods.nodes(probe_names)) == 2,
            "the probe gang bound",
            lambda: log_tail(stream, namespace, "probe-"),
        )
        assert set(pods.nodes(probe_names).values()).isdisjoint(used | set(placed.values()))
        assert pods.ever_bound(over_names) == {}
        assert events_about(events, over_names[0])


def _condition(pod: JSON | None, kind: str) -> JSON:
    for c in (pod or {}).get("status", {}).get("conditions", []):
        if c.get("type") == kind:
            return dict(c)
    return {}


def _unschedulable(pod: JSON | None) -> bool:
    cond = _condition(pod, "PodScheduled")
    return cond.get("status") == "False" and cond.get("reason") == "Unschedulable"


# -- 2. no deadlock between two gangs of 60 % ---------------------------------------------


async def test_of_two_gangs_of_sixty_percent_one_runs_and_the_other_holds_nothing(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    specs = topology(pool, per_rack=5)  # 40 nodes: 24 are 60 %, 16 are 40 %
    groups = f"{X_API}/namespaces/{namespace}/podgroups"
    async with (
        gang_cluster(cluster, kube, namespace, specs, pool) as (_, stream, pods, events),
        tracking(kube, groups) as pgs,
    ):
        for name in ("a", "b"):
            await kube.post(groups, x_pod_group(name, 24, timeout=60))
        a, b = x_gang("a", pool, 24), x_gang("b", pool, 24)
        # Interleaved, as two jobs submitted at once would be.
        await create_pods(kube, namespace, [p for pair in zip(a, b, strict=True) for p in pair])
        names = {g: [f"{g}-{i}" for i in range(24)] for g in ("a", "b")}

        await pods.until(
            lambda: len([g for g in names if len(pods.nodes(names[g])) == 24]) == 1,
            "one gang bound whole",
            lambda: log_tail(stream, namespace, count=20),
        )
        (winner,) = [g for g in names if len(pods.nodes(names[g])) == 24]
        (loser,) = set(names) - {winner}
        # Waited for on the Events' tracker (the pods' would not wake on an Event).
        await events.until(
            lambda: bool(events_about(events, loser)),
            "the other refused (a FailedScheduling Event on its PodGroup)",
            lambda: log_tail(stream, namespace, count=20),
        )
        assert pods.ever_bound(names[loser]) == {}
        waiting = events_about(events, loser)[-1]
        assert waiting["involvedObject"]["kind"] == "PodGroup"
        assert waiting["message"].startswith("0/24 members placed; Unschedulable: "), waiting

        # The loser holds no card: a third gang needing the other 40 % runs beside the winner.
        await kube.post(groups, x_pod_group("c", 16, timeout=60))
        await create_pods(kube, namespace, x_gang("c", pool, 16))
        names["c"] = [f"c-{i}" for i in range(16)]
        await pods.until(
            lambda: len(pods.nodes(names["c"])) == 16,
            "the 40 % gang bound",
            lambda: log_tail(stream, namespace, "c-"),
        )
        first = set(pods.nodes(names[winner]).values())
        third = set(pods.nodes(names["c"]).values())
        assert len(first | third) == 40
        assert pods.ever_bound(names[loser]) == {}
        await pgs.until(
            lambda: pgs.items.get(winner, {}).get("status", {}).get("running") == 24,
            f"PodGroup {winner} Running with 24",
        )
        assert pgs.items[winner]["status"]["phase"] == "Running"
        assert pgs.items[loser]["status"]["phase"] == "Scheduling"

        # The winner finishes (its pods go): the loser runs, on exactly the nodes it left.
        await delete_pods(kube, namespace, names[winner])
        await pods.until(
            lambda: len(pods.nodes(names[loser])) == 24,
            f"gang {loser} bound once {winner} finished",
            lambda: log_tail(stream, namespace, f"{loser}-"),
        )
        assert set(pods.nodes(names[loser]).values()) == first
        await pgs.until(
            lambda: pgs.items.get(loser, {}).get("status", {}).get("running") == 24,
            f"PodGroup {loser} Running with 24",
        )
        phases = [s.get("phase") for s in pgs.history[loser]]
        assert "Failed" not in phases and "Finished" not in phases, phases


# -- 3. a gang that times out --------------------------------------------------------------


async def test_a_gang_that_times_out_releases_every_card_then_runs_once_whole(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    specs = topology(pool, per_rack=2, racks=2)  # 4 nodes: the gang needs all of them
    groups = f"{X_API}/namespaces/{namespace}/podgroups"
    timeout = 8
    async with (
        gang_cluster(cluster, kube, namespace, specs, pool) as (daemon, stream, pods, events),
        tracking(kube, groups) as pgs,
    ):
        await kube.post(groups, x_pod_group("tg", 4, timeout=timeout))
        await pgs.until(
            lambda: pgs.items.get("tg", {}).get("status", {}).get("phase") == "Pending",
            "PodGroup tg Pending (no member yet)",
        )
        members = x_gang("tg", pool, 4)
        members[3] = gpu_pod("tg-3", pool, labels={"gang": "tg"}, pod_group="tg", gated=True)
        names = [m["metadata"]["name"] for m in members]
        await create_pods(kube, namespace, members)

        # Three members placed and parked at Permit (assumed, not bound), the gated one never
        # attempted: what the API shows is a PodGroup Scheduling and no nodeName.
        key = f"{namespace}/tg"
        held = await board_until(
            daemon, GangAPI.COSCHEDULING, key, lambda r: r.placed == 3 and r.pending == 1, 30
        )
        parked = time.monotonic()
        assert held.running == 0
        await pgs.until(
            lambda: pgs.items["tg"].get("status", {}).get("phase") == "Scheduling",
            "PodGroup tg Scheduling (its four pods exist)",
        )
        assert "running" not in pgs.items["tg"]["status"], pgs.items["tg"]["status"]
        assert pods.ever_bound(names) == {}

        # While they wait they hold three nodes and their plan keeps the fourth for the gated
        # member: a probe gang needing all four is refused for capacity, none free for it.
        probe = annotation_gang("probe", pool, 4)
        probe_names = [p["metadata"]["name"] for p in probe]
        await create_pods(kube, namespace, probe)
        await pods.until(
            lambda: _unschedulable(pods.items.get(probe_names[0])),
            "the probe refused while the gang holds three nodes",
            lambda: log_tail(stream, namespace, "", 30),
        )
        refusal = _condition(pods.items[probe_names[0]], "PodScheduled")["message"]
        assert "the capacity free for it holds 0" in refusal, refusal

        # The timeout: every waiting member is rejected and unreserved; the cards go to the
        # probe, which needs all four nodes.
        await pods.until(
            lambda: len(pods.nodes(probe_names)) == 4,
            "the probe bound after the gang's timeout",
            lambda: log_tail(stream, namespace, count=20),
            timeout=timeout + 30,
        )
        released = time.monotonic() - parked
        assert released >= timeout - 1, released
        assert pods.ever_bound(names) == {}

        # The rejections' Events are written in the background (rate-limited): they may
        # reach the watch after the probe's binding does. The members share one deadline,
        # but their timers are separate: the first to fire releases the gang, and a sibling
        # whose timer had not fired yet is rejected as part of that release (saying which
        # member timed out) rather than by its own timer.
        def own_timeout(n: str) -> bool:
            said = [e["message"] for e in events_about(events, n)]
            return any("timeout" in m and "GangScheduling" in m for m in said)

        def timed_out(n: str) -> bool:
            said = [e["message"] for e in events_about(events, n)]
            return own_timeout(n) or any(
                "was rejected: its pod" in m and "(timed out at Permit" in m for m in said
            )

        await events.until(
            lambda: all(timed_out(n) for n in names[:3]) and any(map(own_timeout, names[:3])),
            "a timeout FailedScheduling Event on each waiting member",
            lambda: str({n: [e["message"] for e in events_about(events, n)] for n in names}),
        )
        assert events_about(events, "tg-3") == []  # gated: never attempted
        await events.until(  # the Events' tracker: the PodGroups' would not wake on them
            lambda: any(
                e["message"].startswith("0/4 members placed; Unschedulable: ")
                for e in events_about(events, "tg")
            ),
            "a FailedScheduling Event on PodGroup tg",
            lambda: str([e["message"] for e in events_about(events, "tg")]),
        )
        report = await board_until(daemon, GangAPI.COSCHEDULING, key, lambda r: r.placed == 0, 10)
        assert report.pending == 4
        await pgs.until(
            lambda: "scheduleStartTime" in pgs.items["tg"].get("status", {}),
            "PodGroup tg has a scheduleStartTime once its members were attempted",
        )
        status = pgs.items["tg"]["status"]
        assert status["phase"] == "Scheduling", status

        # The probe finishes and the gate goes: the gang runs whole.
        await delete_pods(kube, namespace, probe_names)
        await kube.merge_patch(pod_path(namespace, "tg-3"), {"spec": {"schedulingGates": None}})
        await pods.until(
            lambda: len(pods.nodes(names)) == 4,
            "the gang bound once its last member is released",
            lambda: log_tail(stream, namespace, "tg-", 20),
            timeout=60,
        )
        await pgs.until(
            lambda: pgs.items["tg"].get("status", {}).get("running") == 4,
            "PodGroup tg Running with 4",
        )
        final = pgs.items["tg"]["status"]
        assert final["phase"] == "Running"
        assert final["scheduleStartTime"] == status["scheduleStartTime"]
        phases = [s.get("phase") for s in pgs.history["tg"] if s.get("phase")]
        assert [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p] == [
            "Pending",
            "Scheduling",
            "Running",
        ], phases


# -- 4. an Indexed Job through WorkloadWithJob -----------------------------------------------


async def test_an_indexed_job_is_gang_scheduled_through_its_workload_and_pod_group(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    specs = topology(pool, per_rack=2)
    spec_by_node = {s.name: s for s in specs}
    where = placement(pool)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "completionMode": "Indexed",
            "completions": 4,
            "parallelism": 4,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": "train"}},
                "spec": {
                    "schedulerName": keys.SCHEDULER_NAME,
                    "nodeSelector": where["node_selector"],
                    "tolerations": where["tolerations"],
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [pod_manifest("main", gpus=CARDS)["spec"]["containers"][0]],
                },
            },
        },
    }
    groups = f"{W_API}/namespaces/{namespace}/podgroups"
    async with (
        gang_cluster(cluster, kube, namespace, specs, pool) as (daemon, stream, pods, _events),
        tracking(kube, groups) as pgs,
    ):
        await kube.post(JOBS.format(namespace=namespace), job)
        await pods.until(
            lambda: len(pods.ever_bound(pods.of("train-"))) == 4,
            "the Job's four pods bound",
            lambda: log_tail(stream, namespace, "train-"),
        )
        bound = pods.ever_bound(pods.of("train-"))
        members = pods.of("train-")
        (group,) = {p["spec"]["schedulingGroup"]["podGroupName"] for p in members.values()}
        await pgs.until(
            lambda: _condition(pgs.items.get(group), "PodGroupScheduled").get("status") == "True",
            f"PodGroup {group} PodGroupScheduled=True",
            lambda: (
                f"status {pgs.items.get(group, {}).get('status')}; the daemon's report"
                f" {_report(daemon, GangAPI.WORKLOAD, f'{namespace}/{group}')};"
                f" {operator_tail(stream)}"
            ),
        )
        # Made by the job controller, not by the test: gang of the Job's parallelism.
        pg = pgs.items[group]
        assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
        assert "Workload" in {o["kind"] for o in pg["metadata"]["ownerReferences"]}
        cond = _condition(pg, "PodGroupScheduled")
        assert cond["reason"] == "Scheduled", cond
        # Placed as one gang: the fewest racks (two of the 2-node racks) under one spine.
        assert len(set(bound.values())) == 4
        racks = {rack_of(spec_by_node, n) for n in bound.values()}
        assert len(racks) == 2, racks
        assert len({spec_by_node[n].spine for n in bound.values()}) == 1
        await kube.delete(
            f"{JOBS.format(namespace=namespace)}/train", query=[("propagationPolicy", "Background")]
        )


# -- 5. the starvation bound ---------------------------------------------------------------

STARVATION_SECONDS = 5.0
MAX_BACKOFF_SECONDS = 2.0
STREAM_PERIOD = 0.25


async def test_a_stream_of_one_pod_gangs_does_not_starve_a_16_pod_gang(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    specs = topology(pool, per_rack=2)  # 16 nodes: the big gang needs every one
    settings = {
        **daemon_settings(),
        "podInitialBackoffSeconds": 0.5,
        "podMaxBackoffSeconds": MAX_BACKOFF_SECONDS,
        "profiles": [
            {
                "schedulerName": keys.SCHEDULER_NAME,
                "pluginConfig": [
                    {"name": "GangScheduling", "args": {"starvationSeconds": STARVATION_SECONDS}}
                ],
            }
        ],
    }
    async with gang_cluster(cluster, kube, namespace, specs, pool, settings) as (
        _,
        stream,
        pods,
        _events,
    ):
        serial = itertools.count()
        live: list[str] = []

        def small() -> JSON:
            name = f"s-{next(serial):03d}"
            live.append(name)
            return gpu_pod(name, pool, annotations={keys.GANG_NAME: name, keys.GANG_TOTAL: "1"})

        await create_pods(kube, namespace, [small() for _ in specs])
        await pods.until(
            lambda: len(pods.nodes(live)) == 16,
            "the one-pod gangs fill the pool",
            lambda: log_tail(stream, namespace, "s-"),
        )
        big = annotation_gang("big", pool, 16)
        big_names = [p["metadata"]["name"] for p in big]
        await create_pods(kube, namespace, big)
        submitted = time.monotonic()

        # The stream: one step per STREAM_PERIOD deletes the oldest small pod and submits a
        # new one-pod gang. The pause sets the arrival rate of the workload; nothing waits
        # on it for a state (the gang's placement is awaited on the pod watch).
        steps = 0

        async def stream_small() -> None:
            nonlocal steps
            loop = asyncio.get_running_loop()
            tick = loop.time()
            while True:
                oldest = live.pop(0)
                await delete_pods(kube, namespace, [oldest])
                await kube.post(pod_path(namespace), small())
                steps += 1
                tick += STREAM_PERIOD
                await asyncio.sleep(max(tick - loop.time(), 0))

        streamer = asyncio.create_task(stream_small())
        try:
            await pods.until(
                lambda: len(pods.nodes(big_names)) == 16,
                "the 16-pod gang bound despite the stream",
                lambda: log_tail(stream, namespace, "big-", 20),
                timeout=90,
            )
        finally:
            streamer.cancel()
            await asyncio.gather(streamer, return_exceptions=True)
        placed_at = max(pods.bound[n][0] for n in big_names)
        waited = placed_at - submitted
        # The documented bound: starvationSeconds until the gang reserves, a backoff before
        # the member that reserves is retried, draining the reserved nodes (16 small pods,
        # one per stream step at the rate measured), and a backoff before the gang is tried
        # again.
        period = waited / max(steps, 1)
        drain = 16 * max(period, STREAM_PERIOD)
        bound = STARVATION_SECONDS + 2 * MAX_BACKOFF_SECONDS + drain
        assert waited <= bound, (waited, bound, steps)
        # Not before the reservation: the stream kept at least 15 nodes busy until then.
        assert waited >= STARVATION_SECONDS, waited
        # Everyone else ran meanwhile: the stream's pods were bound before the reservation.
        assert len(pods.ever_bound(n for n in pods.bound if n.startswith("s-"))) > 16

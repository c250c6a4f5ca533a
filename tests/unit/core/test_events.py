"""ClusterEvents: node updates through the cache and the queue's requeue hints."""

from __future__ import annotations

import dataclasses

from gpusched.model.node import NodeModel
from gpusched.sim.engine import Simulation
from tests.builders import ai_pod, ai_sim, gpu_node

GFD_TIMESTAMP = "nvidia.com/gfd.timestamp"


def labelled(name: str, stamp: int, zone: str = "z1") -> NodeModel:
    labels = {"kubernetes.io/hostname": name, "zone": zone, GFD_TIMESTAMP: str(stamp)}
    return dataclasses.replace(gpu_node(name, cards=2), labels=labels)


def backlog(sim: Simulation) -> None:
    """Pods that fit nowhere, parked as unschedulable: by NodeAffinity and by
    NodeResourcesFit."""
    for i in range(10):
        p = dataclasses.replace(ai_pod(f"sel{i}"), node_selector={"zone": "z9"})
        assert sim.submit(p).result.name == "UNSCHEDULABLE"
        big = ai_pod(f"cpu{i}")
        big = dataclasses.replace(big, request=dataclasses.replace(big.request, cpu_milli=10**6))
        assert sim.submit(big).result.name == "UNSCHEDULABLE"
    assert sim.queue.pending()["unschedulable"] == 20


def test_label_churn_nothing_selects_on_wakes_no_pod() -> None:
    sim = ai_sim(labelled("a", 0), labelled("b", 0))
    backlog(sim)
    snap = sim.snapshot
    sets, gen = len(snap.labelsets), snap.generation
    for stamp in range(1, 10_001):
        sim.events.node_changed(labelled("a", stamp))
        assert sim.queue.pending()["unschedulable"] == 20, stamp
    assert (len(snap.labelsets), snap.generation) == (sets, gen)


def test_an_update_wakes_the_pods_it_may_help() -> None:
    sim = ai_sim(labelled("a", 0), labelled("b", 0))
    backlog(sim)
    sim.clock.advance_to(100.0)  # past their backoff: moved pods go to activeQ
    sim.events.node_changed(labelled("a", 1, zone="z2"))  # a selected key: z9 still absent
    assert sim.queue.where("uid-sel0") == "active" and sim.queue.where("uid-cpu0") == (
        "unschedulable"
    )
    sim.run()  # they fail again and are parked again
    assert sim.queue.pending()["unschedulable"] == 20
    grown = dataclasses.replace(labelled("a", 1, zone="z2"), cpu_milli=128_000)
    sim.events.node_changed(grown)
    assert sim.queue.where("uid-cpu0") == "active" and sim.queue.where("uid-sel0") == (
        "unschedulable"
    )

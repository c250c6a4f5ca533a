"""GPUFragmentation's model pressure: unconstrained pods leave the models constrained pods
need (models.py, the modelWeight term)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpusched.framework.cycle_state import CycleState
from gpusched.model.node import Card, NodeModel
from gpusched.model.pod import PodInfo
from gpusched.plugins.gpu_fragmentation.models import free_per_model, model_pressure
from gpusched.plugins.helper.fgd_target import TargetClass
from gpusched.sim.engine import Simulation
from tests.builders import GiB, frag_sim, t4_pod


def node(name: str, model: str, cards: int) -> NodeModel:
    return NodeModel(
        name=name,
        cpu_milli=64_000,
        memory_bytes=512 * GiB,
        pods=110,
        cards=tuple(Card(i, model, 15360) for i in range(cards)),
    )


def constrained(name: str, model: str, cards: int = 1) -> PodInfo:
    pod = t4_pod(name, cards=cards)
    return dataclasses.replace(pod, request=dataclasses.replace(pod.request, gpu_models=(model,)))


def model_ids(s: Simulation) -> dict[str, int]:
    return {m: s.snapshot.models.find(m) for m in ("T4", "G2")}


def test_pressure_is_the_share_of_a_models_free_cards_constrained_classes_need() -> None:
    s = frag_sim({}, node("t", "T4", 2), node("g", "G2", 6))
    ids = model_ids(s)
    free = free_per_model(s.snapshot)
    assert free[ids["T4"]] == 2000 and free[ids["G2"]] == 6000
    # A quarter of the GPU demand asks for T4: at saturation it needs 0.25 * 8000 milli of
    # T4's 2000 free, all of them.
    classes = [TargetClass(1000, 1000, 1, "T4", 0.25), TargetClass(1000, 1000, 1, "", 0.75)]
    p = model_pressure(classes, s.snapshot)
    assert p[ids["T4"]] == pytest.approx(1.0)
    assert p[ids["G2"]] == 0.0
    # A class that accepts both models splits its need by their free capacity.
    both = [TargetClass(1000, 1000, 1, "T4|G2", 0.5), TargetClass(1000, 1000, 1, "", 0.5)]
    p = model_pressure(both, s.snapshot)
    assert p[ids["T4"]] == pytest.approx(0.5) and p[ids["G2"]] == pytest.approx(0.5)
    # Nothing constrained, or nothing free: no pressure.
    assert not model_pressure([TargetClass(1000, 1000, 1, "", 1.0)], s.snapshot).any()


def test_a_model_no_node_has_adds_no_pressure_anywhere() -> None:
    s = frag_sim({}, node("t", "T4", 2), node("g", "G2", 6))
    p = model_pressure([TargetClass(1000, 1000, 1, "A100", 1.0)], s.snapshot)
    assert not p.any()


def gap(weight: float, pod: PodInfo) -> float:
    """Score on the G2 node minus score on the T4 node, after learning a workload whose
    GPU demand is half T4-only."""
    s = frag_sim({"modelWeight": weight}, node("t", "T4", 2), node("g", "G2", 2))
    plugin = s.fw.plugins["GPUFragmentation"]
    learnt = [constrained(f"c{i}", "T4") for i in range(8)]
    plugin.warm_start(learnt + [t4_pod(f"u{i}", cards=1) for i in range(8)])
    rows = np.array([s.snapshot.row_of("t"), s.snapshot.row_of("g")], np.intp)
    t, g = plugin.score(CycleState(), pod, rows)
    return float(g - t)


@pytest.mark.parametrize("pod", [t4_pod("whole", cards=2), t4_pod("shared", milli=500)])
def test_unconstrained_gpu_pods_are_pointed_away_from_the_model_constrained_pods_need(
    pod: PodInfo,
) -> None:
    # T4's pressure: half the demand needs T4's 2 of 4 free cards, 1.0; G2's is 0. The term
    # blends 30 points in: the rest of the score keeps 70 %, and G2 gains all 30 points.
    assert gap(30, pod) == pytest.approx(0.7 * gap(0, pod) + 30, rel=1e-2)


def test_cpu_only_pods_get_no_model_term() -> None:
    cpu = t4_pod("cpu", cpu=2000)
    # Applied, the term would put G2 30 points ahead.
    assert gap(30, cpu) == pytest.approx(gap(0, cpu), abs=1e-9)


def test_the_pressure_follows_the_target_refresh() -> None:
    s = frag_sim({"modelWeight": 30}, node("t", "T4", 2), node("g", "G2", 6))
    plugin = s.fw.plugins["GPUFragmentation"]
    assert not len(plugin.pressure)
    s.submit(constrained("c0", "T4"))
    # The first pod refreshes the target (at 1, 2, 4, ... pods): all demand is T4-only.
    assert plugin.pressure[model_ids(s)["T4"]] > 0
    assert np.isfinite(plugin.pressure).all()

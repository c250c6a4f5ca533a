"""GPUFragmentation: the online shape learner, its args and the optional score terms."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.config import API_VERSION, KIND, builtin_profiles, config_from_dict
from gpusched.core.scheduler import Result
from gpusched.model.node import Card, NodeModel
from gpusched.model.pod import PodInfo, PodRequest
from gpusched.plugins import default_registry
from gpusched.plugins.gpu_fragmentation.args import GPUFragmentationArgs
from gpusched.plugins.gpu_fragmentation.learner import ShapeLearner
from gpusched.sim.engine import Simulation

GIB = 2**30


def req(cpu: int = 1000, milli: int = 0, cards: int = 0) -> PodRequest:
    return PodRequest(cpu_milli=cpu, memory_bytes=GIB, gpu_milli=milli, gpu_cards=cards)


def pod(name: str, cpu: int = 1000, milli: int = 0, cards: int = 0) -> PodInfo:
    return PodInfo(
        uid=f"uid-{name}",
        namespace="ns",
        name=name,
        request=req(cpu, milli, cards),
        scheduler_name="ai-scheduler",
    )


def node(name: str, cards: int = 2) -> NodeModel:
    return NodeModel(
        name=name,
        cpu_milli=64_000,
        memory_bytes=512 * GIB,
        pods=110,
        cards=tuple(Card(i, "T4", 15360) for i in range(cards)),
    )


def sim(args: dict[str, Any], *nodes: NodeModel) -> Simulation:
    reg = default_registry()
    profile = builtin_profiles()["ai-scheduler"]
    profile["pluginConfig"] = [{"name": "GPUFragmentation", "args": args}]
    doc = {"apiVersion": API_VERSION, "kind": KIND, "profiles": [profile]}
    return Simulation(nodes, config_from_dict(doc, reg).profiles[0], reg, seed=1)


def test_learner_counts_a_pod_once_and_keeps_popular_shapes() -> None:
    lr = ShapeLearner(half_life_pods=0, popularity=0.9, max_classes=8)
    for i in range(9):
        assert lr.observe(f"a{i}", req(milli=500))
    assert lr.observe("b", req(cards=1))
    assert not lr.observe("b", req(cards=1))  # a retry is not a new observation
    target = lr.target()
    assert [(c.gpu_milli, c.gpu_count) for c in target] == [(500, 1)]
    assert target[0].weight == pytest.approx(0.9)


def test_learner_can_leave_cpu_only_shapes_out() -> None:
    for keep in (True, False):
        lr = ShapeLearner(half_life_pods=0, popularity=1.0, max_classes=8, cpu_classes=keep)
        for i in range(3):
            lr.observe(f"c{i}", req(cpu=4000))
        lr.observe("g", req(milli=250))
        milli = sorted(c.gpu_milli for c in lr.target())
        assert milli == ([0, 250] if keep else [250])


def test_learner_decay_follows_a_shift() -> None:
    lr = ShapeLearner(half_life_pods=10, popularity=1.0, max_classes=8)
    for i in range(100):
        lr.observe(f"old{i}", req(milli=300))
    for i in range(100):
        lr.observe(f"new{i}", req(milli=700))
    weights = {c.gpu_milli: c.weight for c in lr.target()}
    assert weights[700] > 0.99


@pytest.mark.parametrize(
    "bad",
    [
        {"pack_weight": -1.0},
        {"card_fit_weight": 51.0},
        {"sos_weight": -0.5},
        {"cpu_balance_weight": 60.0},
        {"refresh_pods": 0},
    ],
)
def test_args_validate(bad: dict[str, Any]) -> None:
    assert GPUFragmentationArgs(**bad).validate()


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"cardFitWeight": 5},
        {"sosWeight": 5},
        {"cpuBalanceWeight": 5},
        {"cpuClasses": False},
        {"quantize": False},
    ],
)
def test_variants_schedule_without_overcommitting(args: dict[str, Any]) -> None:
    s = sim(args, node("a"), node("b"), node("c", cards=4))
    shapes = [(2000, 600, 0), (1000, 400, 0), (4000, 0, 1), (500, 0, 0), (1000, 250, 0)]
    placed = 0
    for i in range(40):
        cpu, milli, cards = shapes[i % len(shapes)]
        d = s.submit(pod(f"p{i}", cpu, milli, cards))
        placed += d.result is Result.SCHEDULED
        snap = s.snapshot
        assert (snap.card_free_milli >= 0).all()
        assert (snap.node_cpu_free >= 0).all()
    assert placed > 0


def test_card_fit_prefers_the_tightest_card_cluster_wide() -> None:
    s = sim({"cardFitWeight": 20}, node("a"), node("b"))
    first = s.submit(pod("s1", milli=600))
    second = s.submit(pod("s2", milli=400))
    assert second.node == first.node
    row = s.snapshot.row_of(first.node)
    assert 0 in [int(x) for x in s.snapshot.card_free_milli[row, :2]]

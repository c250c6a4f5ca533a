"""GPUFragmentation: the online shape learner, its args and the optional score terms."""

from __future__ import annotations

import pytest

from gpusched.model.pod import PodRequest
from gpusched.plugins.gpu_fragmentation.learner import MAX_SHAPES, ShapeLearner, shape_of
from tests.builders import t4_request

GIB = 2**30


def test_learner_counts_a_pod_once_and_keeps_popular_shapes() -> None:
    lr = ShapeLearner(half_life_pods=0, popularity=0.9, max_classes=8)
    for i in range(9):
        assert lr.observe(f"a{i}", t4_request(milli=500))
    assert lr.observe("b", t4_request(cards=1))
    assert not lr.observe("b", t4_request(cards=1))  # a retry is not a new observation
    target = lr.target()
    assert [(c.gpu_milli, c.gpu_count) for c in target] == [(500, 1)]
    assert target[0].weight == pytest.approx(0.9)


def test_learner_can_leave_cpu_only_shapes_out() -> None:
    for keep in (True, False):
        lr = ShapeLearner(half_life_pods=0, popularity=1.0, max_classes=8, cpu_classes=keep)
        for i in range(3):
            lr.observe(f"c{i}", t4_request(cpu=4000))
        lr.observe("g", t4_request(milli=250))
        milli = sorted(c.gpu_milli for c in lr.target())
        assert milli == ([0, 250] if keep else [250])


def test_learner_decay_follows_a_shift() -> None:
    lr = ShapeLearner(half_life_pods=10, popularity=1.0, max_classes=8)
    for i in range(100):
        lr.observe(f"old{i}", t4_request(milli=300))
    for i in range(100):
        lr.observe(f"new{i}", t4_request(milli=700))
    weights = {c.gpu_milli: c.weight for c in lr.target()}
    assert weights[700] > 0.99


def test_learner_shapes_are_bounded_and_keep_the_heavy_ones() -> None:
    # CPU milli and model strings are pod input: one shape per pod must not grow forever.
    lr = ShapeLearner(half_life_pods=0, popularity=0.95, max_classes=8)
    for i in range(5_000):
        lr.observe(f"common{i}", t4_request(milli=500))
        lr.observe(f"odd{i}", PodRequest(cpu_milli=1 + i, gpu_milli=300, gpu_models=(f"m{i}",)))
    assert len(lr.counts) <= MAX_SHAPES
    assert lr.counts[shape_of(t4_request(milli=500))] == 5_000
    top = lr.target()[0]
    assert (top.gpu_milli, top.gpu_count) == (500, 1)

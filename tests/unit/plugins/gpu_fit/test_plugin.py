"""GPUFit through the real framework.

The scenarios run in the simulator, which is the daemon's framework, cache and cycles over
an in-memory cluster: what passes here is what the daemon does.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpusched.config import API_VERSION, KIND, builtin_profiles, config_from_dict
from gpusched.core.schedule_one import Result
from gpusched.framework import ALLOCATION, CycleState
from gpusched.model import keys
from gpusched.model.pod import NVLink
from gpusched.plugins import default_registry
from gpusched.plugins.gpu_fit import GPUFit
from gpusched.plugins.helper.gpu_state import CARD_HINT, GPU_REQUEST, compute_summary, gpu_request
from gpusched.sim.engine import Simulation
from tests.builders import ai_pod, ai_sim, card_free, gpu_node


def test_whole_card_job_not_refused_when_fragmented_elsewhere() -> None:
    # "frag": four half-used cards (2 GPUs of free share in total, no intact card);
    # "ok": one intact card. kube-scheduler's count would be wrong both ways.
    s = ai_sim(gpu_node("frag", cards=4), gpu_node("ok", cards=1))
    # Placed earlier (say by an older scheduler) on one card each, as the API reports them.
    for i in range(4):
        s.cache.add_or_update_pod(
            replace(ai_pod(f"half{i}", gpu_milli=500), node_name="frag", gpu_ids=(i,))
        )
    assert card_free(s, "frag") == [500, 500, 500, 500]
    d = s.submit(ai_pod("big", gpu_cards=1, gpu_mem_mib=81920))
    assert d.result is Result.SCHEDULED and d.node == "ok"
    d2 = s.submit(ai_pod("big2", gpu_cards=1))
    assert d2.result is Result.UNSCHEDULABLE
    assert d2.message == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."


def test_shared_pod_fills_partial_card_and_gets_ids_annotation() -> None:
    s = ai_sim(gpu_node("a", cards=4), gpu_node("b", cards=4))
    first = s.submit(ai_pod("s1", gpu_milli=600))
    second = s.submit(ai_pod("s2", gpu_milli=300))
    assert second.node == first.node  # fills the partial card rather than tearing a new one
    assert card_free(s, first.node).count(100) == 1
    bound = s.cluster.bound["uid-s2"]
    assert bound.annotations[keys.GPU_IDS] == str(bound.gpu_ids[0])
    assert bound.annotations[keys.GPU_MILLI_ASSIGNED] == "300"


def test_whole_card_prefers_the_node_it_fills() -> None:
    s = ai_sim(gpu_node("eight", cards=8), gpu_node("four", cards=4))
    assert s.submit(ai_pod("w4", gpu_cards=4)).node == "four"
    assert s.submit(ai_pod("w8", gpu_cards=8)).node == "eight"


def test_nvlink_required_needs_one_island() -> None:
    # Two islands of 2 cards; one card used in each: 2 intact cards but not in one island.
    s = ai_sim(gpu_node("n", cards=4, island=2))
    assert s.submit(ai_pod("a", gpu_cards=1)).result is Result.SCHEDULED
    row = s.snapshot.row_of("n")
    s.cache.snapshot.card_free_milli[row, 2] = 0  # another tenant holds card 2
    s.cache.snapshot.touch(row)
    d = s.submit(ai_pod("b", gpu_cards=2, nvlink=NVLink.REQUIRED))
    assert d.result is Result.UNSCHEDULABLE
    assert "NVLink island" in d.message
    ok = s.submit(ai_pod("c", gpu_cards=2, nvlink=NVLink.PREFERRED))
    assert ok.result is Result.SCHEDULED


def test_model_constraint_reasons() -> None:
    s = ai_sim(
        gpu_node("a100", model="A100", cards=4), gpu_node("t4", model="T4", mem=15360, cards=4)
    )
    d = s.submit(ai_pod("m", gpu_milli=100, gpu_models=("T4",)))
    assert d.node == "t4"
    d = s.submit(ai_pod("x", gpu_milli=100, gpu_models=("H100",)))
    assert d.result is Result.UNSCHEDULABLE
    assert "no node has a GPU of model H100" in d.message
    cpu = replace(gpu_node("cpu", cards=0), name="cpu")
    s2 = ai_sim(cpu, gpu_node("t4", model="T4", mem=15360, cards=4))
    d = s2.submit(ai_pod("y", gpu_milli=100, gpu_models=("T4",)))
    assert d.node == "t4"
    s2.submit(ai_pod("fill", gpu_cards=3, gpu_models=("T4",)))
    d = s2.submit(ai_pod("z", gpu_cards=1, gpu_models=("T4",)))
    assert d.message == (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had no GPU."
    )


def test_memory_request_on_a_small_card() -> None:
    s = ai_sim(gpu_node("t4", model="T4", mem=15360, cards=4))
    d = s.submit(ai_pod("m", gpu_mem_mib=20480))
    assert d.result is Result.UNSCHEDULABLE
    assert "Insufficient GPU share" in d.message
    d = s.submit(ai_pod("m2", gpu_mem_mib=7680))  # half a T4 by memory: 500 milli of compute
    assert d.alloc is not None and d.alloc.milli == (500,) and d.alloc.mem_mib == (7680,)


def test_cpu_pod_prefers_cpu_node() -> None:
    s = ai_sim(gpu_node("gpu", cards=4), replace(gpu_node("cpu", cards=0), name="cpu"))
    assert s.submit(ai_pod("c")).node == "cpu"


def test_no_card_ever_over_allocated_under_random_load() -> None:
    rng = np.random.default_rng(5)
    s = ai_sim(*(gpu_node(f"n{i}", cards=int(rng.choice([2, 4, 8]))) for i in range(12)))
    live: list[str] = []
    for i in range(600):
        if live and rng.random() < 0.3:
            s.delete(live.pop(int(rng.integers(len(live)))))
            continue
        if rng.random() < 0.5:
            p = ai_pod(f"p{i}", gpu_cards=int(rng.choice([1, 2, 4, 8])))
        else:
            p = ai_pod(f"p{i}", gpu_milli=int(rng.integers(1, 1001)))
        d = s.submit(p)
        if d.result is Result.SCHEDULED:
            live.append(p.uid)
        snap = s.snapshot
        assert (snap.card_free_milli >= 0).all() and (snap.card_free_mem >= 0).all()
    # Recompute from the bound pods (as the API would) and compare with the columns.
    used = {}
    for b in s.cluster.bound.values():
        for c, m in zip(
            b.gpu_ids,
            [1000] * len(b.gpu_ids)
            if b.request.gpu_cards
            else [int(b.annotations[keys.GPU_MILLI_ASSIGNED])],
            strict=True,
        ):
            used[(b.node_name, c)] = used.get((b.node_name, c), 0) + m
    for (name, c), m in used.items():
        assert m <= 1000
        assert s.snapshot.card_free_milli[s.snapshot.row_of(name), c] == 1000 - m


def test_reserve_takes_a_score_plugins_card_hint_only_when_it_fits() -> None:

    s = ai_sim(gpu_node("n", cards=4))
    row = s.snapshot.row_of("n")
    s.cache.snapshot.card_free_milli[row, 3] = 200
    s.cache.snapshot.touch(row)
    plugin = GPUFit(None, s.handle)
    p = ai_pod("h", gpu_milli=300)
    for hinted, expect in ((2, (2,)), (3, (0,))):  # card 3 has only 200 left: ignored
        state = CycleState()
        req = gpu_request(s.snapshot, p)
        assert req is not None
        state.write(GPU_REQUEST, req)
        hint = np.full(s.snapshot.capacity, -1, np.int16)
        hint[row] = hinted
        state.write(CARD_HINT, hint)
        assert plugin.reserve(state, p, "n").is_success()

        assert state.read(ALLOCATION).cards == expect


def test_incremental_summary_cache_equals_a_full_pass() -> None:

    rng = np.random.default_rng(11)
    s = ai_sim(*(gpu_node(f"n{i}", cards=int(rng.choice([2, 4, 8]))) for i in range(40)))
    fit = s.fw.plugins["GPUFit"]
    shapes = [
        ai_pod("a", gpu_cards=1),
        ai_pod("b", gpu_cards=4),
        ai_pod("c", gpu_milli=300),
        ai_pod("d", gpu_milli=250, gpu_mem_mib=30000),
    ]
    live: list[str] = []
    for i in range(300):
        if live and rng.random() < 0.3:
            s.delete(live.pop(int(rng.integers(len(live)))))
        else:
            p = replace(shapes[int(rng.integers(len(shapes)))], uid=f"u{i}", name=f"p{i}")
            if s.submit(p).result is Result.SCHEDULED:
                live.append(p.uid)
        if i == 150:  # a node update and a removal in the middle
            s.cache.upsert_node(gpu_node("n3", cards=2))
            s.cache.remove_node("n7")
        for shape in shapes:
            req = gpu_request(s.snapshot, shape)
            assert req is not None
            got = fit.summaries.summary(s.snapshot, req, shape.request.gpu_models)
            want = compute_summary(s.snapshot, req, s.snapshot.node_valid)
            for name in (
                "fit",
                "intact",
                "usable",
                "best_leftover",
                "best_is_partial",
                "free_milli_total",
            ):
                assert np.array_equal(getattr(got, name), getattr(want, name)), (i, name)
    assert fit.summaries.partial > fit.summaries.full


def test_gpufit_at_filter_and_reserve_without_its_prefilter_still_places_exactly() -> None:
    """A profile with GPUFit's PreFilter disabled (found by the config fuzz test): Filter
    raised KeyError("cycle state has no 'GPUFit/request'") for every pod, CPU pods too."""
    reg = default_registry()
    profile = builtin_profiles()["ai-scheduler"]
    profile["plugins"] = {"preFilter": {"disabled": [{"name": "GPUFit"}]}}
    doc = {"apiVersion": API_VERSION, "kind": KIND, "profiles": [profile]}
    sim = Simulation(
        [gpu_node("a", cards=2), gpu_node("b", cards=2)],
        config_from_dict(doc, reg).profiles[0],
        reg,
        seed=1,
    )
    assert sim.submit(ai_pod("cpu")).result is Result.SCHEDULED
    for i in range(4):
        d = sim.submit(ai_pod(f"w{i}", gpu_cards=1))
        assert d.result is Result.SCHEDULED and d.alloc is not None and len(d.alloc.cards) == 1
    over = sim.submit(ai_pod("over", gpu_cards=1))
    assert over.result is Result.UNSCHEDULABLE and "Insufficient nvidia.com/gpu" in over.message
    assert sim.errors == 0 and card_free(sim, "a") == [0, 0] == card_free(sim, "b")

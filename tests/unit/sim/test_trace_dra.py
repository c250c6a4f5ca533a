"""The FGD protocol's DRA mode (sim/trace_dra.py) places every pod where the annotation path
does: same node, same cards, same shares, same allocation curve."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gpusched.cli import build_parser, main
from gpusched.core.schedule_one import Result
from gpusched.model.pod import PodRequest
from gpusched.model.share import share_on_card
from gpusched.plugins import default_registry
from gpusched.sim.engine import Simulation
from gpusched.sim.fgd_protocol import SeedRun, Trace, load_trace, policy_profile, run_seed
from gpusched.sim.fgd_workload import build_workload
from gpusched.sim.openb import POD_COLUMNS, TraceNode, TracePod
from gpusched.sim.trace_cluster import CARD_MEMORY_MIB, cluster_nodes, pod_info
from gpusched.sim.trace_dra import (
    MEMORY_SHAPES,
    UNIFORM_MEMORY_MIB,
    claim_for,
    dra_fleet,
    dra_pod,
    drop_claim,
    placed_cards,
    share_mib,
)
from tests.traces import require_openb

REG = default_registry()
MODELS = ("P100", "G2", "T4", "V100M32", "A10", "G3")


def fleet() -> tuple[TraceNode, ...]:
    """24 GPU nodes of mixed models and sizes, and two CPU-only nodes (left out by the
    protocol)."""
    rng = np.random.default_rng(11)
    nodes = [
        TraceNode(
            f"n-{i:02d}",
            int(rng.choice([32000, 64000, 96000])),
            262144,
            int(rng.choice([1, 2, 4, 8])),
            MODELS[i % len(MODELS)],
        )
        for i in range(24)
    ]
    nodes += [TraceNode("cpu-0", 64000, 262144, 0, ""), TraceNode("cpu-1", 64000, 262144, 0, "")]
    return tuple(nodes)


def pods(n: int = 300) -> tuple[TracePod, ...]:
    """Trace-like pods: shares of any size, 1-8 whole cards, CPU-only, a multi-card pod with
    partial shares (rounded up to whole cards by both paths), model constraints."""
    rng = np.random.default_rng(5)
    out = []
    for i in range(n):
        kind = rng.integers(10)
        spec = ""
        if kind < 5:
            num, milli = 1, int(rng.integers(1, 1000))
        elif kind < 8:
            num, milli = int(rng.choice([1, 1, 2, 4, 8])), 1000
        elif kind == 8:
            num, milli = 0, 0
        else:
            num, milli = 2, 500
        if num and rng.integers(8) == 0:
            spec = str(rng.choice(["T4", "V100M32|G3", "G2"]))
        cpu = int(rng.choice([2000, 4000, 8000, 16000]))
        out.append(TracePod(f"p-{i:04d}", cpu, 8192, num, milli, spec))
    return tuple(out)


def both(trace: Trace, policy: str, seed: int) -> tuple[SeedRun, SeedRun]:
    wl = build_workload(trace.pods, trace.nodes, seed)
    ann = run_seed(trace, policy, seed, REG, workload=wl, keep_placements=True)
    dra = run_seed(trace, policy, seed, REG, workload=wl, keep_placements=True, dra="uniform")
    return ann, dra


def assert_same(ann: SeedRun, dra: SeedRun) -> None:
    assert ann.errors == dra.errors == 0
    assert len(ann.placements) == len(dra.placements)
    for a, d in zip(ann.placements, dra.placements, strict=True):
        assert (a.pod, a.node, a.gpu_ids, a.gpu_milli) == (d.pod, d.node, d.gpu_ids, d.gpu_milli)
    assert ann.capacity == dra.capacity
    assert np.array_equal(ann.used, dra.used) and np.array_equal(ann.arrived, dra.arrived)
    assert ann.dropped == dra.dropped
    # The unallocated-GPU figures (the whole curve; NaN where no arrival landed).
    assert np.array_equal(ann.curve(), dra.curve(), equal_nan=True)
    assert not np.isnan(dra.curve()).all()


@pytest.mark.parametrize("seed", [47, 48])
def test_fgd_places_claims_as_annotations(seed: int) -> None:
    trace = Trace("gen", fleet(), pods())
    ann, dra = both(trace, "FGD", seed)
    assert_same(ann, dra)
    # Not vacuous: shares, whole cards and drops all occurred.
    placed = [p for p in dra.placements if p.node]
    assert any(len(p.gpu_ids) == 1 and p.gpu_milli[0] < 1000 for p in placed)
    assert any(len(p.gpu_ids) > 1 for p in placed)
    assert 0 < dra.dropped < len(dra.placements)


@pytest.mark.parametrize("policy", ["BestFit", "LeastAllocated"])
def test_other_policies_that_read_shares_through_the_card_model(policy: str) -> None:
    assert_same(*both(Trace("gen", fleet(), pods(200)), policy, 49))


def test_real_trace_reduced() -> None:
    directory = require_openb("openb_pod_list_default.csv")
    full = load_trace(directory, "openb_pod_list_default.csv")
    gpu_nodes = tuple(n for n in full.nodes if n.gpu > 0)
    # Every 40th node keeps the fleet's mix of models; the first pods of the trace.
    trace = Trace(full.name, gpu_nodes[::40], full.pods[:300])
    assert len({n.model for n in trace.nodes}) >= 4
    assert_same(*both(trace, "FGD", 47))


@pytest.mark.parametrize("card_mib", [UNIFORM_MEMORY_MIB, *sorted(set(CARD_MEMORY_MIB.values()))])
def test_share_by_memory_reads_back_as_the_same_share(card_mib: int) -> None:
    """floor(m * card / 1000) MiB is exactly m milli (and the MiB the annotation path's share
    holds) on a card of that memory, for every share."""
    for milli in range(1, 1000):
        by_memory = PodRequest(gpu_mem_mib=share_mib(milli, card_mib))
        assert share_on_card(by_memory, card_mib) == share_on_card(
            PodRequest(gpu_milli=milli), card_mib
        )


def test_claims_and_slices_have_the_nvidia_shape() -> None:
    nodes = fleet()
    f = dra_fleet([n for n in nodes if n.gpu])
    assert [n.cards for n in f.nodes] == [()] * 24
    node = nodes[3]
    m = f.card_map(node.sn)
    assert [c.model for c in m.cards] == [node.model] * node.gpu
    assert [c.memory_mib for c in m.cards] == [UNIFORM_MEMORY_MIB] * node.gpu
    assert all(m.shareable)
    share = pod_info("s", TracePod("s", 1000, 1024, 1, 250, ""))
    claim = claim_for(share, f)
    assert claim is not None
    [request] = claim.requests
    [sub] = request.alternatives
    assert sub.device_class == "gpu.nvidia.com" and sub.count == 1
    assert [v for k, v in sub.capacity_requests.items() if k.endswith("memory")] == [
        share_mib(250, UNIFORM_MEMORY_MIB) * 2**20
    ]
    typed = pod_info("t", TracePod("t", 1000, 1024, 2, 1000, "T4|G2"))
    tclaim = claim_for(typed, f)
    assert tclaim is not None
    [tsub] = tclaim.requests[0].alternatives
    assert tsub.count == 2 and not tsub.capacity_requests and tsub.selectors
    pod = dra_pod(typed, tclaim)
    assert pod.request.gpu_milli_total == 0 and pod.pod_claims[0].claim == tclaim.name
    cpu_only = pod_info("c", TracePod("c", 1000, 1024, 0, 0, ""))
    assert claim_for(cpu_only, f) is None and dra_pod(cpu_only, None) is cpu_only


def test_dropped_pods_lose_their_claims_and_placed_ones_hold_theirs() -> None:
    node = TraceNode("n", 32000, 262144, 1, "T4")
    f = dra_fleet([node])
    profile = policy_profile("FGD", Trace("one", (node,), ()), 1, REG)
    sim = Simulation(f.nodes, profile, REG, dra=f.dra)
    held = {}
    for name, milli in (("a", 600), ("b", 500), ("c", 400)):
        pod = pod_info(name, TracePod(name, 1000, 1024, 1, milli, ""))
        claim = claim_for(pod, f)
        assert claim is not None
        f.dra.put_claim(claim)
        d = sim.submit(dra_pod(pod, claim))
        if d.result is Result.SCHEDULED:
            held[name] = placed_cards(f, claim)
            current = f.dra.claim(claim.namespace, claim.name)
            assert current is not None and [c.uid for c in current.reserved_for] == [pod.uid]
        else:
            sim.withdraw(pod.uid)
            drop_claim(f, claim)
            assert f.dra.claim(claim.namespace, claim.name) is None
    # b did not fit beside a; c did, on the same card.
    assert held == {"a": ((0,), (600,)), "c": ((0,), (400,))}


def test_cli_dra_mode_reports_what_the_annotation_path_does(tmp_path: Path) -> None:
    nodes = [n for n in fleet() if n.gpu]
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"{n.sn},{n.cpu_milli},{n.memory_mib},{n.gpu},{n.model}\n" for n in nodes)
    )
    (tmp_path / "openb_pod_list_gen.csv").write_text(
        ",".join(POD_COLUMNS)
        + "\n"
        + "".join(
            f"{p.name},{p.cpu_milli},{p.memory_mib},{p.num_gpu},{p.gpu_milli},{p.gpu_spec},"
            "LS,Running,0,10,0\n"
            for p in pods(150)
        )
    )
    out = {}
    for mode in ([], ["--dra"]):
        path = tmp_path / f"out{len(mode)}.json"
        code = main(
            [
                "simulate",
                "--protocol=fgd",
                f"--trace-dir={tmp_path}",
                "--pods=openb_pod_list_gen.csv",
                "--seeds=47",
                "--policies=FGD",
                f"--json-out={path}",
                f"--reference-dir={tmp_path}",
                *mode,
            ]
        )
        assert code == 0
        out[len(mode)] = json.loads(path.read_text())["policies"]["FGD"]
    assert out[0]["unallocated_pct_at_100"] == out[1]["unallocated_pct_at_100"]


def test_cli_dra_choices_are_the_memory_shapes() -> None:
    """Listed literally in the parser (like the tie-breaks); they must not drift."""
    parser = build_parser()
    assert parser.parse_args(["simulate"]).dra is None
    assert parser.parse_args(["simulate", "--dra"]).dra == MEMORY_SHAPES[0]
    for shape in MEMORY_SHAPES:
        assert parser.parse_args(["simulate", "--dra", shape]).dra == shape


def test_model_memory_shape_is_faithful_but_shares_are_absolute() -> None:
    """With the models' memory a share asks for m/1000 of a 16 GiB card, so on a 32 GiB card
    it holds half the compute share the annotation path gives it (why "uniform" is the
    exact shape)."""
    node = TraceNode("g3", 32000, 262144, 1, "G3")
    f = dra_fleet([node], "model")
    assert [c.memory_mib for c in f.card_map("g3").cards] == [CARD_MEMORY_MIB["G3"]]
    profile = policy_profile("FGD", Trace("one", (node,), ()), 1, REG)
    sim = Simulation(f.nodes, profile, REG, dra=f.dra)
    pod = pod_info("s", TracePod("s", 1000, 1024, 1, 500, ""))
    claim = claim_for(pod, f)
    assert claim is not None
    f.dra.put_claim(claim)
    assert sim.submit(dra_pod(pod, claim)).result is Result.SCHEDULED
    assert placed_cards(f, claim) == ((0,), (250,))


def test_fgd_prices_an_annotation_memory_share_as_its_compute_share() -> None:
    """The FGD fix on its own: pods asking a share by gpu-memory-mib (no DRA) go where the
    same shares asked by gpu-milli go (FGD read gpu_milli only and priced them as no GPU)."""
    nodes = tuple(TraceNode(f"g-{i}", 64000, 262144, 1 + i % 4, "G2") for i in range(8))
    trace = Trace("g2", nodes, ())
    profile = policy_profile("FGD", Trace("g2", nodes, pods(150)), 1, REG)
    placed: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
    for how in ("milli", "memory"):
        sim = Simulation(cluster_nodes(list(trace.nodes)), profile, REG, seed=1)
        out = placed[how] = []
        for p in pods(150):
            pod = pod_info(p.name, p)
            req = pod.request
            if how == "memory" and req.gpu_milli and not req.gpu_cards:
                by_memory = replace(
                    req, gpu_milli=0, gpu_mem_mib=share_mib(req.gpu_milli, CARD_MEMORY_MIB["G2"])
                )
                pod = replace(pod, request=by_memory)
            d = sim.submit(pod)
            if d.result is Result.SCHEDULED and d.alloc is not None:
                out.append((d.node, d.alloc.cards))
            else:
                sim.withdraw(pod.uid)
                out.append(("", ()))
    assert placed["milli"] == placed["memory"]
    assert sum(1 for n, _ in placed["memory"] if n) > 30

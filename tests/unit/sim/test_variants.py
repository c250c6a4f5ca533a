"""Workload variants (sim/variants.py): reproducible, on target, placeable, wired into the CLI."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from gpusched.cli import main
from gpusched.sim.fgd_protocol import load_trace
from gpusched.sim.fgd_workload import build_workload, cluster_milli_gpu
from gpusched.sim.openb import TraceNode, TracePod, load_nodes, load_pods, write_nodes, write_pods
from gpusched.sim.variants import (
    SPEC_SOURCE,
    VARIANTS,
    VariantError,
    apply_variant,
    constraint_mix,
    placeable,
    resolve,
    small_scale,
    spec_share,
)
from tests.traces import require_openb

SPEC10 = SPEC_SOURCE
DEFAULT = "openb_pod_list_default.csv"


@pytest.fixture(scope="module")
def openb() -> Path:
    return require_openb(SPEC10)


@pytest.fixture(scope="module")
def nodes(openb: Path) -> list[TraceNode]:
    return load_nodes(openb)


@pytest.fixture(scope="module")
def spec10(openb: Path) -> list[TracePod]:
    return load_pods(openb, SPEC10)


@pytest.fixture(scope="module")
def default(openb: Path) -> list[TracePod]:
    return load_pods(openb, DEFAULT)


def gpu_share(pods: Sequence[TracePod], pred: object) -> float:
    gpu = [p for p in pods if p.num_gpu > 0]
    assert callable(pred)
    return sum(1 for p in gpu if pred(p)) / len(gpu)


def constrained(p: TracePod) -> bool:
    return bool(p.gpu_spec.strip("|"))


def shared(p: TracePod) -> bool:
    return p.num_gpu == 1 and 0 < p.gpu_milli < 1000


# --- reproducibility -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["spec33", "share60", "scarce-T4"])
def test_same_seed_same_output_other_seed_other_output(
    name: str, spec10: list[TracePod], nodes: list[TraceNode], openb: Path
) -> None:
    a = apply_variant(name, spec10, nodes, 0, trace_dir=openb)
    b = apply_variant(name, spec10, nodes, 0, trace_dir=openb)
    c = apply_variant(name, spec10, nodes, 1, trace_dir=openb)
    assert a == b
    assert a != c


def test_composition_steps_draw_from_their_own_streams(
    spec10: list[TracePod], nodes: list[TraceNode]
) -> None:
    """spec33 is the same pods whether or not a CPU step follows it."""
    alone, _ = apply_variant("spec33", spec10, nodes, 0)
    both, _ = apply_variant("spec33+cpu250", spec10, nodes, 0)
    assert [p.gpu_spec for p in alone] == [p.gpu_spec for p in both]
    assert sum(p.cpu_milli for p in both) > sum(p.cpu_milli for p in alone)


# --- targets -------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "share"), [("spec20", 0.20), ("spec33", 0.33), ("spec50", 0.50)])
def test_spec_share_is_hit_from_the_trace_mix_and_placeable(
    name: str, share: float, spec10: list[TracePod], nodes: list[TraceNode]
) -> None:
    pods, out_nodes = apply_variant(name, spec10, nodes, 0)
    assert out_nodes == nodes
    assert abs(gpu_share(pods, constrained) - share) <= 0.01
    base_mix = constraint_mix(spec10)
    changed = [p for p, q in zip(pods, spec10, strict=True) if p != q]
    gpu = sum(1 for p in spec10 if p.num_gpu > 0)
    assert len(changed) == round(share * gpu) - sum(1 for p in spec10 if constrained(p))
    fits = placeable(nodes)
    for p, q in zip(pods, spec10, strict=True):
        if p != q:
            # Only the constraint moves, to a constraint of the base's mix the pod can take.
            assert p.gpu_spec in base_mix and not q.gpu_spec
            assert (p.cpu_milli, p.num_gpu, p.gpu_milli) == (q.cpu_milli, q.num_gpu, q.gpu_milli)
            assert fits(p), p
    # The mix is the base's: T4 leads both, with about the same share.
    new = Counter(p.gpu_spec for p in changed)
    assert new.most_common(1)[0][0] == Counter(base_mix).most_common(1)[0][0] == "T4"
    assert abs(new["T4"] / len(changed) - base_mix["T4"] / sum(base_mix.values())) < 0.05


def test_spec_on_a_trace_without_constraints_borrows_gpuspec10s_mix(
    default: list[TracePod], nodes: list[TraceNode], openb: Path, tmp_path: Path
) -> None:
    pods, _ = apply_variant("spec33", default, nodes, 0, trace_dir=openb)
    assert abs(gpu_share(pods, constrained) - 0.33) <= 0.01
    assert set(constraint_mix(pods)) <= set(constraint_mix(load_pods(openb, SPEC10)))
    with pytest.raises(VariantError, match="no model constraints"):
        apply_variant("spec33", default, nodes, 0, trace_dir=tmp_path)


def test_spec_lower_than_the_base_removes_constraints(
    spec10: list[TracePod], nodes: list[TraceNode]
) -> None:
    pods, _ = apply_variant("spec20+spec20", spec10, nodes, 0)  # idempotent at the target
    assert abs(gpu_share(pods, constrained) - 0.20) <= 0.01
    fewer = spec_share(spec10, nodes, np.random.default_rng(0), 0.05, constraint_mix(spec10))
    assert abs(gpu_share(fewer, constrained) - 0.05) <= 0.01


def test_a_pod_no_constraint_can_place_stays_free() -> None:
    nodes = [TraceNode("a", 16000, 65536, 2, "T4"), TraceNode("b", 96000, 393216, 8, "G2")]
    big = TracePod("big", 8000, 4096, 8, 1000)  # only G2 has 8 cards
    small = [TracePod(f"s{i}", 1000, 1024, 1, 1000) for i in range(3)]
    out = spec_share([big, *small], nodes, np.random.default_rng(0), 1.0, {"T4": 1})
    assert out[0].gpu_spec == ""  # T4 could never take 8 cards
    assert all(p.gpu_spec == "T4" for p in out[1:])


@pytest.mark.parametrize(("name", "factor"), [("cpu150", 1.5), ("cpu250", 2.5)])
def test_cpu_scaling_of_cpu_only_pods(
    name: str, factor: float, default: list[TracePod], nodes: list[TraceNode]
) -> None:
    pods, _ = apply_variant(name, default, nodes, 0)
    cap = max(n.cpu_milli for n in nodes if n.gpu > 0)
    for p, q in zip(pods, default, strict=True):
        if q.num_gpu > 0:
            assert p == q
        else:
            assert p.cpu_milli == min(cap, round(q.cpu_milli * factor))


def test_cpu_scaling_is_capped_at_the_largest_gpu_node() -> None:
    nodes = [TraceNode("a", 16000, 65536, 2, "T4"), TraceNode("c", 200000, 1 << 20, 0, "")]
    pods = [TracePod("cpu", 10000, 1024, 0, 0), TracePod("gpu", 10000, 1024, 1, 1000)]
    out, _ = apply_variant("cpu250", pods, nodes, 0)
    assert [p.cpu_milli for p in out] == [16000, 10000]  # a CPU-only node does not count


@pytest.mark.parametrize(("name", "share"), [("share20", 0.20), ("share60", 0.60)])
def test_shared_share_is_hit(
    name: str, share: float, default: list[TracePod], nodes: list[TraceNode]
) -> None:
    pods, _ = apply_variant(name, default, nodes, 0)
    assert abs(gpu_share(pods, shared) - share) <= 0.01
    millis = {q.gpu_milli for q in default if shared(q)}
    for p, q in zip(pods, default, strict=True):
        if p != q:
            assert p.num_gpu == q.num_gpu == 1 and p.cpu_milli == q.cpu_milli
            if share > 0.5:
                assert q.gpu_milli == 1000 and p.gpu_milli in millis
            else:
                assert shared(q) and p.gpu_milli == 1000


# --- fleets --------------------------------------------------------------------------------


def test_drop_removes_the_model_and_keeps_constrained_pods_placeable(
    spec10: list[TracePod], nodes: list[TraceNode]
) -> None:
    pods, kept = apply_variant("drop-V100M32", spec10, nodes, 0)
    assert kept == [n for n in nodes if n.model != "V100M32"]
    assert not any("V100M32" in p.gpu_spec for p in pods if p.num_gpu > 0)
    before, after = placeable(nodes), placeable(kept)
    for p, q in zip(pods, spec10, strict=True):
        if before(q):
            assert after(p), (q, p)
    # V100M32-only pods went free; "V100M16|V100M32" narrowed to V100M16.
    only = [i for i, q in enumerate(spec10) if q.num_gpu and q.gpu_spec == "V100M32"]
    assert only and all(pods[i].gpu_spec == "" for i in only)
    both = [i for i, q in enumerate(spec10) if q.num_gpu and q.gpu_spec == "V100M16|V100M32"]
    assert both and all(pods[i].gpu_spec == "V100M16" for i in both)


def test_scarce_keeps_a_quarter_of_each_shape(
    spec10: list[TracePod], nodes: list[TraceNode]
) -> None:
    pods, kept = apply_variant("scarce-T4", spec10, nodes, 0)
    assert pods == spec10
    shape = Counter((n.gpu, n.cpu_milli, n.memory_mib) for n in nodes if n.model == "T4")
    after = Counter((n.gpu, n.cpu_milli, n.memory_mib) for n in kept if n.model == "T4")
    assert after == {s: -(-c // 4) for s, c in shape.items()}
    assert [n for n in kept if n.model != "T4"] == [n for n in nodes if n.model != "T4"]


# --- small<K>: the scale model ---------------------------------------------------------------


def node_shape(n: TraceNode) -> tuple[str, int, int, int]:
    return (n.model, n.gpu, n.cpu_milli, n.memory_mib)


def pod_shape(p: TracePod) -> tuple[int, int, str, int, int]:
    return (p.num_gpu, p.gpu_milli, p.gpu_spec, p.cpu_milli, p.memory_mib)


@pytest.mark.parametrize("factor", [4, 8, 16])
def test_small_keeps_every_node_shape_and_each_pod_shape_share(
    factor: int, spec10: list[TracePod], nodes: list[TraceNode]
) -> None:
    pods, kept = small_scale(spec10, nodes, np.random.default_rng(0), factor)
    # Nodes: ceil(count / K) of every shape, in file order.
    before, after = Counter(map(node_shape, nodes)), Counter(map(node_shape, kept))
    assert after == {s: -(-c // factor) for s, c in before.items()}
    assert kept == [n for n in nodes if n in set(kept)]
    # Pods: each shape's count / K within one pod (systematic sampling), in file order.
    before_p, after_p = Counter(map(pod_shape, spec10)), Counter(map(pod_shape, pods))
    for shape, count in before_p.items():
        assert count // factor <= after_p[shape] <= -(-count // factor), shape
    assert len(pods) in (len(spec10) // factor, -(-len(spec10) // factor))
    kept_names = {p.name for p in pods}
    assert pods == [p for p in spec10 if p.name in kept_names]
    # Every pod the full fleet could place, the small one can (no shape is lost).
    full_fits, small_fits = placeable(nodes), placeable(kept)
    assert all(small_fits(p) for p in pods if full_fits(p))


def test_small_keeps_the_protocols_arrival_rule_at_a_kth_of_the_length(
    default: list[TracePod], nodes: list[TraceNode]
) -> None:
    """The list's GPU demand stays near its share of the fleet (default: 0.98), so the
    protocol still shuffles the whole list and clones up to 1.3x, on 1/8 of the arrivals."""
    full = build_workload(default, nodes, 42)
    pods, kept = apply_variant("small8", default, nodes, 0)
    small = build_workload(pods, kept, 42)
    assert full.tuning == small.tuning == "up"
    assert 0.9 <= small.requested_milli_gpu / cluster_milli_gpu(kept) / 1.3 <= 1.0
    assert abs(len(small.pods) * 8 / len(full.pods) - 1) < 0.1
    assert {n.model for n in kept} == {n.model for n in nodes}
    assert abs(cluster_milli_gpu(kept) * 8 / cluster_milli_gpu(nodes) - 1) < 0.06


def test_small_names_seeds_and_composition(
    spec10: list[TracePod], nodes: list[TraceNode], openb: Path
) -> None:
    assert apply_variant("small", spec10, nodes, 0) == apply_variant("small8", spec10, nodes, 0)
    assert apply_variant("small8", spec10, nodes, 0) != apply_variant("small8", spec10, nodes, 1)
    assert len(apply_variant("small16", spec10, nodes, 0)[1]) < len(
        apply_variant("small8", spec10, nodes, 0)[1]
    )
    # Last in a composition, it scales the variant: the spec step saw the whole trace.
    spec, _ = apply_variant("spec33", spec10, nodes, 0, trace_dir=openb)
    both = apply_variant("spec33+small8", spec10, nodes, 0, trace_dir=openb)
    assert both == apply_variant("small8", spec, nodes, 0)
    assert abs(gpu_share(both[0], constrained) - 0.33) <= 0.02
    for bad in ("small1", "small0"):
        with pytest.raises(VariantError, match="K >= 2"):
            resolve(bad)
    with pytest.raises(VariantError, match="small<K>"):
        resolve("smallish")


def test_bad_names() -> None:
    with pytest.raises(VariantError, match="spec20, spec33"):
        resolve("spec99")
    with pytest.raises(VariantError, match="empty"):
        resolve("spec33+")
    with pytest.raises(VariantError, match="models: T4"):
        apply_variant("drop-H100", [], [TraceNode("a", 1000, 1000, 2, "T4")])
    assert len(resolve("drop-G3+spec20")) == 2
    assert {"spec20", "spec33", "spec50", "cpu150", "cpu250", "share20", "share60"} <= set(VARIANTS)


# --- the CLI -------------------------------------------------------------------------------

# 176 cards: no arrival moves the demand by more than 1.2 % (the curve needs one near 100 %).
NODES = tuple(
    TraceNode(f"n-{k}{i}", cpu, mem, gpu, model)
    for k in range(8)
    for i, (cpu, mem, gpu, model) in enumerate(
        [
            (64000, 262144, 2, "P100"),
            (96000, 393216, 8, "G2"),
            (96000, 393216, 4, "T4"),
            (96000, 393216, 8, "G2"),
        ]
    )
)


@pytest.fixture
def tiny_dir(tmp_path: Path) -> Path:
    return write_tiny_trace(tmp_path / "trace")


def write_tiny_trace(d: Path) -> Path:
    """A tiny openb-format trace dir: shared, whole, multi-card, CPU-only and typed pods
    (the default and gpuspec10 pod lists, the GPU node list)."""
    d.mkdir()
    write_nodes(d / "openb_node_list_gpu_node.csv", NODES)
    shapes = [(4000, 1, 300, ""), (8000, 1, 1000, ""), (16000, 2, 1000, ""), (3000, 0, 0, "")]
    shapes += [(6000, 1, 500, "T4"), (12000, 2, 1000, "G2")]
    pods = []
    for i in range(120):
        cpu, num_gpu, milli, spec = shapes[i % len(shapes)]
        pods.append(TracePod(f"p-{i:03d}", cpu, 4096, num_gpu, milli, spec))
    write_pods(d / SPEC10, pods)
    write_pods(
        d / DEFAULT, [TracePod(p.name, p.cpu_milli, 4096, p.num_gpu, p.gpu_milli) for p in pods]
    )
    return d


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_simulate_on_a_variant_end_to_end(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--protocol", "fgd", "--trace-dir", str(tiny_dir), "--pods", SPEC10]
    argv += ["--seeds", "42", "--policies", "FGD", "--variant", "spec50+share60"]
    argv += ["--json-out", str(tmp_path / "out.json")]
    rc, text = run(argv, capsys)
    assert rc == 0, text
    assert "gpuspec10+spec50+share60" in text
    assert "no published result" in text and "Traceback" not in text
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["trace"] == "gpuspec10+spec50+share60" and out["published"] is False
    assert 0 <= out["policies"]["FGD"]["unallocated_pct_at_100"]["mean"] <= 100
    # Another variant seed is another trace name.
    rc, text = run([*argv[:-2], "--variant-seed", "3"], capsys)
    assert rc == 0 and "gpuspec10+spec50+share60@3" in text


def test_simulate_with_a_bad_variant_name(
    tiny_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--protocol", "fgd", "--trace-dir", str(tiny_dir), "--variant", "spec99"]
    rc, text = run(argv, capsys)
    assert rc == 2 and "Traceback" not in text
    assert "--variant" in text and "spec99" in text and "spec33" in text and "cpu250" in text
    rc, text = run([*argv[:-1], "drop-H100"], capsys)
    assert rc == 2 and "H100" in text and "G2" in text


def test_variants_list(capsys: pytest.CaptureFixture[str]) -> None:
    rc, text = run(["variants", "list"], capsys)
    assert rc == 0
    for name, v in VARIANTS.items():
        assert name in text and v.description in text


def test_variants_write_then_simulate_reads_it_back(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "variants"
    argv = ["variants", "write", "--trace-dir", str(tiny_dir), "--out", str(out)]
    rc, text = run([*argv, "--names", "spec33", "scarce-G2"], capsys)
    assert rc == 0, text
    trace = load_trace(
        out, "openb_pod_list_gpuspec10+scarce-G2.csv", "openb_node_list_gpuspec10+scarce-G2.csv"
    )
    assert trace.name == "gpuspec10+scarce-G2"
    pods, nodes = apply_variant("scarce-G2", load_pods(tiny_dir, SPEC10), list(NODES), 0)
    assert list(trace.pods) == pods and list(trace.nodes) == nodes
    assert len(nodes) == 20  # 16 G2 nodes of one shape: 4 kept
    assert (
        load_pods(out, "openb_pod_list_gpuspec10+spec33.csv")
        == apply_variant("spec33", load_pods(tiny_dir, SPEC10), list(NODES), 0)[0]
    )


def test_variants_write_refuses_a_git_checkout(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = Path(__file__).resolve().parents[3]
    assert (repo / ".git").exists()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / ".git").write_text("gitdir: elsewhere\n")  # a worktree's .git file
    for out in (repo / "traces-out", tmp_path / "other" / "sub" / "dir"):
        rc, text = run(
            ["variants", "write", "--trace-dir", str(tiny_dir), "--out", str(out)], capsys
        )
        assert rc == 2 and "git checkout" in text, text
        assert not out.exists()

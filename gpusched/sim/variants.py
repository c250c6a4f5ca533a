"""Workload variants: seeded stress versions of the five dev openb pod lists (issue 17).

A variant is a transformation ``(pods, nodes, rng) -> (pods, nodes)`` of a trace, named so that
``gpusched simulate --protocol fgd --variant NAME`` and ``gpusched variants write`` can build it
from the dev traces alone: the held-out openb lists (gpuspec20/25/33, cpu100/200/250,
gpushare60/80/100, multigpu30/40/50) stay unseen, and these stand in for them. Names compose
left to right with ``+`` (``spec33+cpu250``); each step draws from its own stream.

**Seed.** The variant seed (default :data:`DEFAULT_SEED`, 0) is the variant's own: it decides
which pods change and what they become, and nothing else. It is independent of the protocol's
arrival seeds (42-51), so a variant is one fixed file for every arrival seed, as a published
trace is. Step ``k`` of a composition draws from ``default_rng([seed, crc32(step name)])``,
so ``spec33`` is the same whether or not ``cpu250`` follows it.

The variants (``docs/workload-variants.md`` says what each stresses):

* ``spec20|spec33|spec50``: the share of GPU pods with a ``gpu_spec`` model constraint becomes
  20/33/50 % (a base above that loses constraints on random pods). Each newly constrained pod
  gets a constraint drawn from the trace's own mix (the empirical distribution of non-empty
  ``gpu_spec`` among its GPU pods; a trace without any takes gpuspec10's, the only dev list
  with constraints), restricted to the constraints the pod can ever be placed under: some node
  of an allowed model has at least its cards, CPU and memory. A pod with no such constraint
  stays unconstrained and another pod is taken.
* ``cpu150|cpu250``: CPU-only pods ask for x1.5 / x2.5 the CPU, capped at the largest GPU
  node's CPU so each stays placeable (the protocol's cluster is the GPU nodes). No draws.
* ``share20|share60``: the share of shared pods (one card, 0 < gpu_milli < 1000) among GPU pods
  becomes 20 / 60 %: random shared pods become 1-card whole pods, or random 1-card whole pods
  become shared with a gpu_milli drawn from the trace's own shared pods. If the trace lacks
  the pods to convert, the share stops at the nearest reachable value.
* ``drop-<MODEL>``: that model's nodes leave the fleet; see :func:`drop_model` for the pods
  constrained to it. ``scarce-<MODEL>``: keep a seeded quarter of that model's nodes; see
  :func:`scarce_model`. Any model of the node list works; three are registered.
* ``small`` / ``small<K>`` (``small`` is ``small8``): a 1/K scale model of the trace for fast
  checks (the robustness regression test): see :func:`small_scale`. Put it last
  (``spec33+small8``), so the stress steps see the whole trace.

Plain Python and NumPy, on :mod:`gpusched.sim.openb`'s types only, so a notebook can use it.
"""

from __future__ import annotations

import math
import os
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from gpusched.sim.openb import TraceNode, TracePod, load_pods

__all__ = [
    "DEFAULT_SEED",
    "FLEET_STEPS",
    "SPEC_SOURCE",
    "VARIANTS",
    "Variant",
    "VariantError",
    "apply_variant",
    "base_of",
    "constraint_mix",
    "cpu_scale",
    "drop_model",
    "placeable",
    "scarce_model",
    "shared_share",
    "small_scale",
    "spec_share",
    "variant_label",
    "variant_names",
]

DEFAULT_SEED = 0
# The only dev pod list with model constraints: the mix a trace without any borrows.
SPEC_SOURCE = "openb_pod_list_gpuspec10.csv"
_DEFAULT_BASE = "openb_pod_list_default.csv"
MILLI = 1000
SCARCE_KEEP = 0.25  # scarce-<MODEL> keeps this share of each node shape of the model
FLEET_STEPS = ("drop", "scarce")
_FLEET = re.compile(r"^(drop|scarce)-(\S+)$")
SMALL_FACTOR = 8  # `small` is `small8`: one FGD-protocol run takes ~1/10 of the time
_SMALL = re.compile(r"^small(\d*)$")

Pods = list[TracePod]
Nodes = list[TraceNode]
# A step: the trace, its stream, and the constraint mix a spec step falls back on (the
# variant's caller supplies it, since reading it may need the trace directory).
SpecMix = Callable[[], Mapping[str, int]]
Step = Callable[
    [Sequence[TracePod], Sequence[TraceNode], np.random.Generator, SpecMix], tuple[Pods, Nodes]
]


class VariantError(ValueError):
    """An unknown variant name, or a variant that cannot apply to this trace."""


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    base: str  # the dev pod list it is meant to be built from
    description: str  # one line, for `gpusched variants list`
    step: Step


# --- helpers -------------------------------------------------------------------------------


def _models(spec: str) -> frozenset[str]:
    return frozenset(m for m in spec.split("|") if m)


def _is_gpu(p: TracePod) -> bool:
    return p.num_gpu > 0


def _is_shared(p: TracePod) -> bool:
    # fgd_workload.PodResource.is_gpu_share after pod_resource's clamping.
    return p.num_gpu == 1 and 0 < p.gpu_milli < MILLI


def _is_whole_one(p: TracePod) -> bool:
    return p.num_gpu == 1 and p.gpu_milli >= MILLI


class _Shapes:
    """Each model's distinct node shapes (cards, CPU, memory): placeability in a few compares."""

    def __init__(self, nodes: Sequence[TraceNode]) -> None:
        by_model: dict[str, set[tuple[int, int, int]]] = {}
        for n in nodes:
            if n.gpu > 0:
                by_model.setdefault(n.model, set()).add((n.gpu, n.cpu_milli, n.memory_mib))
        self.by_model = by_model

    def fits(self, pod: TracePod, models: frozenset[str] | None) -> bool:
        """Some node of one of ``models`` (None: any model) can hold ``pod`` when empty."""
        keys = self.by_model if models is None else models
        return any(
            g >= pod.num_gpu and c >= pod.cpu_milli and m >= pod.memory_mib
            for model in keys
            for g, c, m in self.by_model.get(model, ())
        )


def placeable(nodes: Sequence[TraceNode]) -> Callable[[TracePod], bool]:
    """Whether a pod (its constraint included) fits some GPU node of ``nodes`` when that node
    is empty: a predicate, so the node shapes are gathered once for many pods."""
    shapes = _Shapes(nodes)

    def fits(pod: TracePod) -> bool:
        models = _models(pod.gpu_spec) if pod.num_gpu > 0 and pod.gpu_spec else None
        return shapes.fits(pod, models)

    return fits


def constraint_mix(pods: Sequence[TracePod]) -> dict[str, int]:
    """How many GPU pods carry each non-empty ``gpu_spec`` (the string verbatim)."""
    mix: dict[str, int] = {}
    for p in pods:
        if _is_gpu(p) and _models(p.gpu_spec):
            mix[p.gpu_spec] = mix.get(p.gpu_spec, 0) + 1
    return mix


def _target(share: float, total: int) -> int:
    return round(share * total)


# --- pod-mix steps -------------------------------------------------------------------------


def spec_share(
    pods: Sequence[TracePod],
    nodes: Sequence[TraceNode],
    rng: np.random.Generator,
    share: float,
    mix: Mapping[str, int],
) -> Pods:
    """GPU pods with a model constraint become ``share`` of the GPU pods (module docstring)."""
    out = list(pods)
    gpu = [i for i, p in enumerate(out) if _is_gpu(p)]
    constrained = [i for i in gpu if _models(out[i].gpu_spec)]
    target = _target(share, len(gpu))
    if len(constrained) > target:
        for i in rng.choice(constrained, len(constrained) - target, replace=False):
            out[int(i)] = replace(out[int(i)], gpu_spec="")
        return out
    if len(constrained) == target:
        return out
    if not mix:
        raise VariantError("no model constraints to draw from (the mix is empty)")
    specs = sorted(mix)  # a fixed order: the draws must not depend on dict order
    weights = np.array([mix[s] for s in specs], np.float64)
    model_sets = [_models(s) for s in specs]
    shapes = _Shapes(nodes)
    need = target - len(constrained)
    free = np.array([i for i in gpu if not _models(out[i].gpu_spec)], np.int64)
    for i in rng.permutation(free):
        pod = out[int(i)]
        ok = np.array([shapes.fits(pod, m) for m in model_sets])
        if not ok.any():
            continue  # no constraint of the mix could ever place it: leave it free
        w = np.where(ok, weights, 0.0)
        pick = int(rng.choice(len(specs), p=w / w.sum()))
        out[int(i)] = replace(pod, gpu_spec=specs[pick])
        need -= 1
        if need == 0:
            break
    return out


def cpu_scale(pods: Sequence[TracePod], nodes: Sequence[TraceNode], factor: float) -> Pods:
    """CPU-only pods ask ``factor`` x their CPU, capped at the largest GPU node's CPU."""
    cap = max((n.cpu_milli for n in nodes if n.gpu > 0), default=0)
    return [
        p if _is_gpu(p) else replace(p, cpu_milli=min(cap, round(p.cpu_milli * factor)))
        for p in pods
    ]


def shared_share(pods: Sequence[TracePod], rng: np.random.Generator, share: float) -> Pods:
    """Shared pods become ``share`` of the GPU pods (module docstring)."""
    out = list(pods)
    gpu = [i for i, p in enumerate(out) if _is_gpu(p)]
    shared = [i for i in gpu if _is_shared(out[i])]
    target = _target(share, len(gpu))
    if len(shared) > target:
        for i in rng.choice(shared, len(shared) - target, replace=False):
            out[int(i)] = replace(out[int(i)], gpu_milli=MILLI)
    elif len(shared) < target:
        if not shared:
            raise VariantError("no shared pods to draw a gpu_milli from")
        millis = np.array([out[i].gpu_milli for i in shared], np.int64)
        whole = [i for i in gpu if _is_whole_one(out[i])]
        picked = rng.choice(whole, min(target - len(shared), len(whole)), replace=False)
        for i, milli in zip(picked, rng.choice(millis, len(picked)), strict=True):
            out[int(i)] = replace(out[int(i)], gpu_milli=int(milli))
    return out


# --- fleet steps ---------------------------------------------------------------------------


def _check_model(model: str, nodes: Sequence[TraceNode]) -> None:
    models = sorted({n.model for n in nodes if n.gpu > 0})
    if model not in models:
        raise VariantError(f"no {model!r} GPU nodes in the node list (models: {', '.join(models)})")


def drop_model(
    pods: Sequence[TracePod], nodes: Sequence[TraceNode], model: str
) -> tuple[Pods, Nodes]:
    """Remove ``model``'s nodes. A GPU pod whose ``gpu_spec`` names ``model`` loses it from its
    list; if no model is left, or none of the remaining ones has a node that can hold the pod,
    the pod loses its constraint altogether (any model), so that it stays placeable. Pods
    without a constraint are unchanged (a pod only the dropped model could hold, by size, is
    then dropped by the protocol, as any pod no node takes)."""
    _check_model(model, nodes)
    kept = [n for n in nodes if n.model != model]
    shapes = _Shapes(kept)
    out: Pods = []
    for p in pods:
        models = _models(p.gpu_spec)
        if _is_gpu(p) and model in models:
            rest = [m for m in p.gpu_spec.split("|") if m and m != model]
            spec = "|".join(rest) if rest and shapes.fits(p, frozenset(rest)) else ""
            out.append(replace(p, gpu_spec=spec))
        else:
            out.append(p)
    return out, kept


def scarce_model(nodes: Sequence[TraceNode], model: str, rng: np.random.Generator) -> Nodes:
    """Keep a seeded ``SCARCE_KEEP`` (rounded up) of ``model``'s nodes, node shape by node
    shape (cards, CPU, memory), so that every shape keeps at least one node and every pod
    that was placeable stays so (pods are unchanged). Other nodes and the file order stay."""
    _check_model(model, nodes)
    groups: dict[tuple[int, int, int], list[int]] = {}
    for i, n in enumerate(nodes):
        if n.model == model:
            groups.setdefault((n.gpu, n.cpu_milli, n.memory_mib), []).append(i)
    drop: set[int] = set()
    for shape in sorted(groups):
        members = groups[shape]
        keep = set(rng.choice(members, math.ceil(SCARCE_KEEP * len(members)), replace=False))
        drop.update(i for i in members if i not in keep)
    return [n for i, n in enumerate(nodes) if i not in drop]


# --- scale ---------------------------------------------------------------------------------


def _pod_stratum(p: TracePod) -> tuple[int, int, str, int, int]:
    # GPU shape first (what the policies trade), then CPU and memory: neighbours in this
    # order are alike, so every K-th of the sorted list keeps each shape's share within 1/K.
    return (p.num_gpu, p.gpu_milli, p.gpu_spec, p.cpu_milli, p.memory_mib)


def small_scale(
    pods: Sequence[TracePod], nodes: Sequence[TraceNode], rng: np.random.Generator, factor: int
) -> tuple[Pods, Nodes]:
    """A 1/``factor`` scale model of the trace: both lists shrink, so that the FGD protocol's
    arrivals shrink with the fleet and keep the full trace's structure.

    * **Nodes**: each node shape (model, cards, CPU, memory) keeps a seeded
      ``ceil(count / factor)`` of its nodes (as :func:`scarce_model`), so every model and
      every shape stays, and every pod that was placeable stays so. Shapes rarer than
      ``factor`` keep one node, so they weigh a little more than in the full fleet.
    * **Pods**: systematic sampling, every ``factor``-th pod of the list sorted by shape
      (GPU count, per-card share, model constraint, CPU, memory, then name) from a seeded
      offset in ``[0, factor)``: each shape keeps its count / ``factor`` within one pod, so
      the mix (constrained, shared, CPU-only shares) is the trace's.

    Why the pods too: the protocol (``fgd_workload.build_workload``) shuffles the *whole*
    pod list and then clones pods until the GPU demand reaches 1.3x the fleet's cards (or
    removes random pods if the list alone is over it). Shrinking only the fleet would turn
    the full run's "every trace pod once, then clones" into a random subset; shrinking both
    keeps the list's demand at the same fraction of the fleet (default: 0.98), so the
    arrivals are built by the same rule at 1/``factor`` of the length. File order is kept.
    """
    if factor < 2:
        raise VariantError(f"small<K> needs K >= 2, got {factor}")
    groups: dict[tuple[str, int, int, int], list[int]] = {}
    for i, n in enumerate(nodes):
        groups.setdefault((n.model, n.gpu, n.cpu_milli, n.memory_mib), []).append(i)
    keep_nodes: set[int] = set()
    for shape in sorted(groups):
        members = groups[shape]
        count = math.ceil(len(members) / factor)
        keep_nodes.update(int(i) for i in rng.choice(members, count, replace=False))
    order = sorted(range(len(pods)), key=lambda i: (_pod_stratum(pods[i]), pods[i].name))
    offset = int(rng.integers(factor))
    keep_pods = set(order[offset::factor])
    return (
        [p for i, p in enumerate(pods) if i in keep_pods],
        [n for i, n in enumerate(nodes) if i in keep_nodes],
    )


# --- the registry --------------------------------------------------------------------------


def _spec(share: float) -> Step:
    def step(
        pods: Sequence[TracePod], nodes: Sequence[TraceNode], rng: np.random.Generator, mix: SpecMix
    ) -> tuple[Pods, Nodes]:
        own = constraint_mix(pods)
        return spec_share(pods, nodes, rng, share, own or mix()), list(nodes)

    return step


def _cpu(factor: float) -> Step:
    def step(
        pods: Sequence[TracePod], nodes: Sequence[TraceNode], rng: np.random.Generator, mix: SpecMix
    ) -> tuple[Pods, Nodes]:
        return cpu_scale(pods, nodes, factor), list(nodes)

    return step


def _share(share: float) -> Step:
    def step(
        pods: Sequence[TracePod], nodes: Sequence[TraceNode], rng: np.random.Generator, mix: SpecMix
    ) -> tuple[Pods, Nodes]:
        return shared_share(pods, rng, share), list(nodes)

    return step


def _fleet(kind: str, model: str) -> Step:
    def step(
        pods: Sequence[TracePod], nodes: Sequence[TraceNode], rng: np.random.Generator, mix: SpecMix
    ) -> tuple[Pods, Nodes]:
        if kind == "drop":
            return drop_model(pods, nodes, model)
        return list(pods), scarce_model(nodes, model, rng)

    return step


def _small(factor: int) -> Step:
    def step(
        pods: Sequence[TracePod], nodes: Sequence[TraceNode], rng: np.random.Generator, mix: SpecMix
    ) -> tuple[Pods, Nodes]:
        return small_scale(pods, nodes, rng, factor)

    return step


def _small_description(factor: int) -> str:
    return f"1/{factor} scale model: every node shape and pod shape kept (fast checks)"


def _fleet_description(kind: str, model: str) -> str:
    if kind == "drop":
        return f"no {model} nodes; constraints naming {model} lose it (or go) to stay placeable"
    return f"{model} scarce: a seeded quarter of its nodes (each node shape kept)"


_SPEC_BASE = SPEC_SOURCE
VARIANTS: Mapping[str, Variant] = {
    v.name: v
    for v in (
        Variant(
            "spec20",
            _SPEC_BASE,
            "20 % of GPU pods model-constrained (gpuspec10's mix)",
            _spec(0.20),
        ),
        Variant(
            "spec33",
            _SPEC_BASE,
            "33 % of GPU pods model-constrained (gpuspec10's mix)",
            _spec(0.33),
        ),
        Variant(
            "spec50",
            _SPEC_BASE,
            "50 % of GPU pods model-constrained (gpuspec10's mix)",
            _spec(0.50),
        ),
        Variant(
            "cpu150",
            _DEFAULT_BASE,
            "CPU-only pods ask x1.5 CPU (capped at the largest GPU node)",
            _cpu(1.5),
        ),
        Variant(
            "cpu250",
            _DEFAULT_BASE,
            "CPU-only pods ask x2.5 CPU (capped at the largest GPU node)",
            _cpu(2.5),
        ),
        Variant(
            "share20",
            _DEFAULT_BASE,
            "20 % of GPU pods shared (shared pods made whole)",
            _share(0.20),
        ),
        Variant(
            "share60",
            _DEFAULT_BASE,
            "60 % of GPU pods shared (1-card pods made shared)",
            _share(0.60),
        ),
        # T4 is the model constrained pods ask for most (gpuspec10: 355 T4-only pods).
        Variant(
            "scarce-T4", _SPEC_BASE, _fleet_description("scarce", "T4"), _fleet("scarce", "T4")
        ),
        # G2 is 70 % of the cards: a quarter of it leaves a fleet of 2-card T4s and mixed models.
        Variant(
            "scarce-G2", _SPEC_BASE, _fleet_description("scarce", "G2"), _fleet("scarce", "G2")
        ),
        # V100M32 appears in most multi-model constraints; dropping it narrows them.
        Variant(
            "drop-V100M32",
            _SPEC_BASE,
            _fleet_description("drop", "V100M32"),
            _fleet("drop", "V100M32"),
        ),
    )
}


def variant_names() -> str:
    """The valid names, for error messages."""
    return ", ".join([*VARIANTS, "drop-<MODEL>", "scarce-<MODEL>", "small<K>", "A+B (composition)"])


def _resolve_step(name: str) -> Variant:
    if name in VARIANTS:
        return VARIANTS[name]
    small = _SMALL.match(name)
    if small is not None:
        factor = int(small.group(1) or SMALL_FACTOR)
        if factor < 2:
            raise VariantError(f"{name!r}: small<K> needs K >= 2 (small8 is the usual one)")
        # Named by its factor, so `small` and `small8` draw from the same stream.
        canonical = f"small{factor}"
        return Variant(canonical, _DEFAULT_BASE, _small_description(factor), _small(factor))
    m = _FLEET.match(name)
    if m is None:
        raise VariantError(f"unknown variant {name!r} (known: {variant_names()})")
    kind, model = m.group(1), m.group(2)
    return Variant(name, _SPEC_BASE, _fleet_description(kind, model), _fleet(kind, model))


def resolve(name: str) -> list[Variant]:
    """The steps of ``name`` (``a+b``: a, then b); :class:`VariantError` for an unknown one."""
    parts = name.split("+")
    if not name or any(not p for p in parts):
        raise VariantError(f"empty variant name in {name!r} (known: {variant_names()})")
    return [_resolve_step(p) for p in parts]


# The five dev pod lists (openb_pod_list_<name>.csv) and the variants that the placement
# table (sim/variant_table.py) and the robustness check (tests/regression) run.
DEV_TRACES = ("default", "gpushare40", "multigpu20", "gpuspec10", "cpu050")
STRESS = (
    "spec20",
    "spec33",
    "spec50",
    "cpu150",
    "cpu250",
    "share20",
    "share60",
    "scarce-T4",
    "scarce-G2",
    "drop-V100M32",
)


def base_of(name: str) -> str:
    """The pod list ``name`` is built from: its first step's base."""
    return resolve(name)[0].base


def variant_label(name: str, seed: int = DEFAULT_SEED) -> str:
    """``name``, with ``@seed`` when the seed is not the default (trace names, file names)."""
    return name if seed == DEFAULT_SEED else f"{name}@{seed}"


def _stream(seed: int, step: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(step.encode())])


def apply_variant(
    name: str,
    pods: Sequence[TracePod],
    nodes: Sequence[TraceNode],
    seed: int = DEFAULT_SEED,
    *,
    trace_dir: str | os.PathLike[str] | None = None,
) -> tuple[Pods, Nodes]:
    """Apply ``name``'s steps in order. A spec step on pods without constraints reads the
    mix from :data:`SPEC_SOURCE` in ``trace_dir`` (:class:`VariantError` if there is none)."""
    steps = resolve(name)

    def fallback_mix() -> Mapping[str, int]:
        if trace_dir is None or not (Path(trace_dir) / SPEC_SOURCE).is_file():
            raise VariantError(
                f"the pods have no model constraints to draw from and {SPEC_SOURCE} is not"
                f" in the trace directory ({trace_dir})"
            )
        return constraint_mix(load_pods(trace_dir, SPEC_SOURCE))

    out_pods, out_nodes = list(pods), list(nodes)
    for v in steps:
        out_pods, out_nodes = v.step(out_pods, out_nodes, _stream(seed, v.name), fallback_mix)
    return out_pods, out_nodes

"""GPU model names: the trace's short names and GPU Feature Discovery's product names as one.

Users meet two spellings of a card model: the short names of the Alibaba trace and of this
project's examples (`A100M80`, `T4`, `V100M32`), and what `kubectl get nodes -L
nvidia.com/gpu.product` shows (`NVIDIA-A100-SXM4-80GB`, `Tesla-T4`), which is also what
`gpusched agent` writes in a card's inventory `model` and what NVIDIA's DRA driver's
`productName` becomes (dra/cards.py). `gpusched.io/gpu-model` accepts either on every node,
whichever of them the node's cards were published under.

The rule: a name is replaced by its **canonical** name before it is compared, on both sides
(the snapshot interns card models by it; a pod's constraint is parsed to it):

* a name in `KNOWN_MODELS` (either spelling) is the row's short name;
* any other name is itself, after trimming and turning inner whitespace into '-' (GFD's
  own rule for NVML names: "NVIDIA H100 80GB HBM3" is `NVIDIA-H100-80GB-HBM3`). So a
  model with no short name here is asked for by its product name, exactly as
  nvidia.com/gpu.product spells it (case matters, as in label values).

The table is one-to-one: a short name stands for one product, so asking for a product never
matches another product's cards. The short names canonical keeps the trace's names
unchanged (the simulator interns the same strings as before).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuProduct:
    """``short`` is the trace's name; ``product`` GFD's nvidia.com/gpu.product value;
    ``memory_mib`` and ``family`` what GFD writes in nvidia.com/gpu.memory and
    nvidia.com/gpu.family for it (the dev cluster's fake nodes use them)."""

    short: str
    product: str
    memory_mib: int
    family: str


# The models of the Alibaba trace and the dev cluster. G2/G3 are the trace's anonymised
# models: no product is known, so their product name is the short name, and their memory is
# a guess that keeps them between V100M32 and A100M80 (the README says so).
KNOWN_MODELS: tuple[GpuProduct, ...] = (
    GpuProduct("A100M80", "NVIDIA-A100-SXM4-80GB", 81920, "ampere"),
    GpuProduct("V100M32", "Tesla-V100-SXM2-32GB", 32768, "volta"),
    GpuProduct("V100M16", "Tesla-V100-SXM2-16GB", 16384, "volta"),
    GpuProduct("P100", "Tesla-P100-PCIE-16GB", 16384, "pascal"),
    GpuProduct("T4", "Tesla-T4", 15360, "turing"),
    GpuProduct("A10", "NVIDIA-A10", 23028, "ampere"),
    GpuProduct("G2", "G2", 32768, "unknown"),
    GpuProduct("G3", "G3", 49152, "unknown"),
)

BY_SHORT: dict[str, GpuProduct] = {m.short: m for m in KNOWN_MODELS}
_CANONICAL: dict[str, str] = {
    **{m.product: m.short for m in KNOWN_MODELS},
    **{m.short: m.short for m in KNOWN_MODELS},
}
_SPACES = re.compile(r"\s+")


def canonical(name: str) -> str:
    """The name a model is compared by: its short name when known, else itself with
    whitespace as GFD writes it ('-')."""
    got = _CANONICAL.get(name)
    if got is not None:
        return got
    cleaned = _SPACES.sub("-", name.strip())
    return _CANONICAL.get(cleaned, cleaned)


def canonical_models(names: Iterable[str]) -> tuple[str, ...]:
    """A pod's "any of" list in canonical names, first spelling first, each model once
    (`T4|Tesla-T4` is one model)."""
    return tuple(dict.fromkeys(canonical(n) for n in names))


def spellings(name: str) -> tuple[str, ...]:
    """Every name `gpusched.io/gpu-model` accepts for this model: (short, product) for a
    known one (one name when they are equal), else the canonical name alone."""
    c = canonical(name)
    known = BY_SHORT.get(c)
    if known is None or known.product == known.short:
        return (c,)
    return (known.short, known.product)


def product_name(name: str) -> str:
    """GFD's nvidia.com/gpu.product for a model (the canonical name when none is known)."""
    c = canonical(name)
    known = BY_SHORT.get(c)
    return known.product if known is not None else c


def describe(names: Iterable[str], sep: str = ", ") -> str:
    """Models for a message, every spelling shown: "A100M80 (NVIDIA-A100-SXM4-80GB), H100"."""
    out = []
    for name in names:
        s = spellings(name)
        out.append(s[0] if len(s) == 1 else f"{s[0]} ({s[1]})")
    return sep.join(out)

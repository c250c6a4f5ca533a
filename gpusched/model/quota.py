"""Quota resources: what a tenant's pods use, in the units an ElasticQuota counts.

An `ElasticQuota` (scheduler-plugins' `scheduling.x-k8s.io/v1alpha1`) limits ResourceLists
(`spec.min`, `spec.max`). gpusched counts these names, in these units:

    nvidia.com/gpu            GPUs as the scheduler places them: a whole card is 1, a share
                              of one card its fraction ("250m" is a quarter card); counted in
                              milli-GPU (1000 per card)
    gpusched.io/gpu-memory    GPU memory where a pod asks for it (a share's
                              gpusched.io/gpu-memory-mib, or a whole-card pod's minimum card
                              memory x its cards); counted in MiB. A quantity ("40Gi")
    cpu                       requests, milli-CPU
    memory                    requests, bytes
    pods                      every placed pod counts 1

A `Usage` is one vector over these names (RESOURCES order). A ResourceList names any subset;
a name it does not list is not limited by it (`None`). Other names (`requests.cpu`,
`limits.memory`, extended resources) are refused with a message: silently ignoring a
misspelt limit would let a tenant past the quota its admin believes is set.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

from gpusched.model.node import FULL_CARD_MILLI
from gpusched.model.pod import PodRequest
from gpusched.model.quantity import QuantityError, to_int, to_milli

GPU = "nvidia.com/gpu"
GPU_MEMORY = "gpusched.io/gpu-memory"
CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
RESOURCES: tuple[str, ...] = (GPU, GPU_MEMORY, CPU, MEMORY, PODS)
INDEX: Mapping[str, int] = {name: i for i, name in enumerate(RESOURCES)}
_MIB = 2**20

Usage = tuple[int, ...]
"""One amount per RESOURCES entry, in the units above."""

Limits = tuple[int | None, ...]
"""One limit per RESOURCES entry; None: not limited."""

ZERO: Usage = (0,) * len(RESOURCES)
UNLIMITED: Limits = (None,) * len(RESOURCES)


def usage_of(request: PodRequest) -> Usage:
    """What one placed pod with this request counts against its tenant's quota."""
    if request.gpu_cards:
        gpu = request.gpu_cards * FULL_CARD_MILLI
        gpu_mem = request.gpu_cards * request.gpu_mem_mib
    else:
        gpu = request.gpu_milli
        gpu_mem = request.gpu_mem_mib
    return (gpu, gpu_mem, request.cpu_milli, request.memory_bytes, 1)


def add(a: Sequence[int], b: Sequence[int], sign: int = 1) -> Usage:
    # map over operator.add/sub: ~7x faster than a generator over zip (ElasticQuota's
    # PreFilter adds a few of these for every pod).
    if len(a) != len(b):
        raise ValueError(f"usage vectors of different lengths: {len(a)} and {len(b)}")
    if sign == 1:
        return tuple(map(operator.add, a, b))
    if sign == -1:
        return tuple(map(operator.sub, a, b))
    return tuple(x + sign * y for x, y in zip(a, b, strict=True))


def exceeds(usage: Sequence[int], limits: Limits) -> list[str]:
    """The names whose usage is above its limit (an unlimited name never is)."""
    return [
        RESOURCES[i]
        for i, (u, lim) in enumerate(zip(usage, limits, strict=True))
        if lim is not None and u > lim
    ]


def parse_resource_list(raw: object, where: str, errors: list[str]) -> Limits:
    """A ResourceList (`spec.min` or `spec.max`) as Limits; each problem appended to
    `errors` naming `where` and the entry (the entry is then left unlimited)."""
    if raw is None:
        return UNLIMITED
    if not isinstance(raw, Mapping):
        errors.append(f"{where} must be a map of resource name to quantity, got {raw!r}")
        return UNLIMITED
    out: list[int | None] = list(UNLIMITED)
    for name, value in raw.items():
        i = INDEX.get(str(name))
        if i is None:
            errors.append(
                f"{where}[{name!r}] is not a resource gpusched counts (one of"
                f" {', '.join(RESOURCES)})"
            )
            continue
        try:
            amount = _amount(str(name), value)
        except QuantityError as exc:
            errors.append(f"{where}[{name!r}]: {exc}")
            continue
        if amount < 0:
            errors.append(f"{where}[{name!r}]={value!r} is negative")
            continue
        out[i] = amount
    return tuple(out)


def _amount(name: str, value: Any) -> int:
    if name in (GPU, CPU):
        return to_milli(value)
    if name == GPU_MEMORY:
        return -(-to_int(value) // _MIB)  # MiB, rounded up
    return to_int(value)


def render(usage: Sequence[int | None]) -> dict[str, str]:
    """A Usage (or Limits) as a ResourceList of quantity strings, every limited name (what
    `status.used` carries; zeros included, so a tenant's usage that drops to zero shows)."""
    out: dict[str, str] = {}
    for name, amount in zip(RESOURCES, usage, strict=True):
        if amount is None:
            continue
        if name in (GPU, CPU):
            out[name] = str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
        elif name == GPU_MEMORY:
            out[name] = f"{amount}Mi" if amount else "0"
        else:
            out[name] = str(amount)
    return out


def describe(name: str, amount: int) -> str:
    """One amount in words for messages ("2.5 GPUs", "8000m cpu")."""
    if name == GPU:
        return f"{amount / 1000:g} GPU" + ("" if amount == 1000 else "s")
    if name == GPU_MEMORY:
        return f"{amount} MiB of GPU memory"
    if name == CPU:
        return f"{amount}m cpu"
    if name == MEMORY:
        return f"{amount} bytes of memory"
    return f"{amount} pod" + ("" if amount == 1 else "s")

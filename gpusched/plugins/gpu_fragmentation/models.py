"""Model pressure: how much of each GPU model's free capacity model-constrained pods need.

The learnt workload says which share of the GPU demand asks for particular models (a pod
with ``gpu-model: T4|P100`` can run nowhere else). If the cluster fills up with that mix,
each constrained class k needs ``D_k = q_k * F`` milli of GPU (q_k its share of the learnt
GPU demand, F the free GPU now) from its models A_k. Split over A_k in proportion to their
free capacity, model m is asked for ``sum_k D_k * F_m / F(A_k)`` of its ``F_m`` free milli:

    pressure[m] = sum over constrained k with m in A_k of  q_k * F / F(A_k)

A pressure of 1 means constrained pods alone would take all of m's free cards; 0 that no
constrained pod needs m. An unconstrained pod that takes a card of a model under pressure
takes it from a pod that has no other choice, so the score charges GPU pods the pressure of
the node's model (capped at 1): among the models a pod accepts it prefers the ones nobody
else needs. The split is the proportional one rather than an LP's: with the demand scaled
to the free capacity the LP's duals are degenerate (every card is worth one card), and the
proportional split is what makes the pressures comparable between models.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.snapshot import NO_CARD, NodeColumns
from gpusched.plugins.helper.fgd_target import TargetClass


def free_per_model(snap: NodeColumns) -> NDArray[np.float64]:
    """Free milli of healthy cards on valid nodes, per model id."""
    m = max(1, len(snap.models))
    cards = snap.node_valid[:, None] & snap.card_healthy & (snap.card_model != NO_CARD)
    model = snap.card_model[cards].astype(np.intp)
    free = snap.card_free_milli[cards].astype(np.float64)
    out: NDArray[np.float64] = np.bincount(model, weights=free, minlength=m)[:m].astype(np.float64)
    return out


def model_pressure(classes: Sequence[TargetClass], snap: NodeColumns) -> NDArray[np.float64]:
    """pressure[m] per model id (all zero when no learnt class is constrained)."""
    if not any(c.gpu_models and c.gpu_milli for c in classes):
        # The usual case (no model-constrained pod learnt): no pass over the card columns.
        return np.zeros(max(1, len(snap.models)), np.float64)
    free = free_per_model(snap)
    out = np.zeros(len(free), np.float64)
    gpu = [c.weight * c.gpu_milli * max(c.gpu_count, 1) for c in classes]
    total_gpu, total_free = sum(gpu), float(free.sum())
    if total_gpu <= 0 or total_free <= 0:
        return out
    for c, g in zip(classes, gpu, strict=True):
        models = tuple(x for x in c.gpu_models.split("|") if x)
        if g <= 0 or not models:
            continue
        allowed = snap.allowed_models(models)[: len(free)]
        reach = float(free[allowed].sum())
        if reach > 0:
            out[allowed] += (g / total_gpu) * total_free / reach
    return out

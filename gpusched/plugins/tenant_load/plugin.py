"""TenantLoad (Score): a node already loaded by the pod's tenant scores lower.

The load of a node for a tenant is the share of the node's GPUs (whole cards and card
shares, in milli-GPU) that the tenant's placed pods (bound or assumed) hold there, read
from the cache's per-namespace, per-row index (Handle.tenant_gpu_rows), so a score costs
one vector over the rows, never a walk over pods. The score is

    100 x (1 - excess),  excess = max(0, load - allowed) / (1 - allowed)
    allowed = max(freeShare, the tenant's share of all GPUs in use in the cluster)

A tenant holding a fraction f of the GPUs in use may hold up to f of any node for free:
what it holds beyond its proportion concentrates it, and is what scores lower (a node it
fills scores 0). With one tenant (f = 1) nothing is penalised, so a cluster without
tenants packs exactly as without the plugin. Spreading each tenant's GPUs over more nodes
means a node's failure or drain takes a little from many tenants rather than much from
one. Pods without GPUs, tenants with no GPU placed, and nodes without cards score 100
everywhere: the plugin then changes no ranking.

The tenant is Handle.tenancy's (the Namespace's `gpusched.io/tenant` label, else the
namespace), never a label on the pod (a pod owner can write those).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import MAX_NODE_SCORE, Handle, Rows, Scores, ScoreUnit
from gpusched.model.node import FULL_CARD_MILLI
from gpusched.model.pod import PodInfo
from gpusched.model.quota import ZERO
from gpusched.plugins.helper.args import checked_args
from gpusched.plugins.tenant_load.args import TenantLoadArgs


class TenantLoad:
    name: ClassVar[str] = "TenantLoad"
    score_unit: ClassVar[ScoreUnit] = ScoreUnit(
        "points (0-100)",
        (
            "100 x (1 - the tenant's GPU share of the node beyond its cluster-wide proportion): "
            "100 when not over"
        ),
    )
    Args: ClassVar[type[TenantLoadArgs]] = TenantLoadArgs

    def __init__(self, args: TenantLoadArgs | None, handle: Handle) -> None:
        self.args = checked_args(args, TenantLoadArgs)
        self.handle = handle

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        out = np.full(len(rows), float(MAX_NODE_SCORE))
        req = pod.request
        if not (req.gpu_cards or req.gpu_milli):
            return out
        tenant = self.handle.tenancy.tenant_of(pod.namespace)
        usages = self.handle.tenant_usages()
        own = usages.get(tenant, ZERO)[0]
        in_use = sum(u[0] for u in usages.values())
        allowed = max(self.args.free_share, own / in_use if in_use > 0 else 1.0)
        if own <= 0 or allowed >= 1.0:
            return out
        held = self.handle.tenant_gpu_rows(tenant)
        snap = self.handle.snapshot
        total = snap.node_card_count[rows].astype(np.float64) * FULL_CARD_MILLI
        load = np.divide(held[rows], total, out=np.zeros(len(rows)), where=total > 0)
        excess = np.clip((load - allowed) / (1.0 - allowed), 0.0, 1.0)
        out -= MAX_NODE_SCORE * excess
        return out

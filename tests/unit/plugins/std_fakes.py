"""A real Snapshot and a tiny Handle for the standard plugins' unit tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from gpusched.core.cache.snapshot import Snapshot
from gpusched.framework import FilterResult, Mask, Rows
from gpusched.model.node import Card, NodeModel, Taint
from gpusched.model.pod import PodInfo, PodRequest

GiB = 2**30
MiB = 2**20


def node(
    name: str,
    *,
    cpu: int = 4_000,
    mem: int = 16 * GiB,
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[tuple[str, str, str]] = (),
    unschedulable: bool = False,
    cards: int = 0,
) -> NodeModel:
    return NodeModel(
        name=name,
        cpu_milli=cpu,
        memory_bytes=mem,
        pods=pods,
        cards=tuple(Card(i, "A100", 81920) for i in range(cards)),
        labels=dict(labels or {}),
        taints=tuple(Taint(k, v, e) for k, v, e in taints),
        unschedulable=unschedulable,
    )


def snapshot(*nodes: NodeModel) -> Snapshot:
    snap = Snapshot(max_cards=8, capacity=4)  # small capacity: tests also cover growth
    for n in nodes:
        snap.upsert_node(n)
    return snap


def pod(name: str = "p", *, request: PodRequest | None = None, **kw: Any) -> PodInfo:
    return PodInfo(
        uid=f"uid-{name}", namespace="ns", name=name, request=request or PodRequest(), **kw
    )


def all_rows(snap: Snapshot) -> Mask:
    return snap.node_valid.copy()


def passing(snap: Snapshot, res: FilterResult) -> list[str]:
    return sorted(snap.names_of(np.flatnonzero(res.feasible)))


def reasons_by_node(snap: Snapshot, candidates: Mask, res: FilterResult) -> dict[str, str]:
    """node name -> the reason the filter gives for rejecting it."""
    out: dict[str, str] = {}
    for row in np.flatnonzero(candidates & ~res.feasible):
        code = 0 if res.codes is None else int(res.codes[row])
        out[snap.names[row]] = res.reasons[code]
    return out


def rows_of(snap: Snapshot, *names: str) -> Rows:
    return np.array([snap.row_of(n) for n in names], np.intp)

"""A gang victim whose member a PodDisruptionBudget protects spans two nodes: once the
budget rules it out on the cheapest node, the gang's other node must not still offer it
(the rows holding any of its members are computed again), so the preemptor evicts the
next cheapest victim and never a gang in part."""

from __future__ import annotations

import dataclasses

from gpusched.framework.disruption import Budget
from tests.unit.plugins.preemption.test_preemption import _gang, _place, _sim, _victims
from tests.unit.plugins.preemption.test_preemption import _pod as pod


def test_a_gang_victim_with_a_budget_protected_member_is_not_touched_on_any_node() -> None:
    s = _sim("n0", "n1", "n2")
    _place(s, pod("x", 8), 0.0)  # 8 cards since t=0: the dear victim
    s.advance(2500.0)
    keep = dataclasses.replace(_gang("g0", "g", 2, 8), labels={"keep": "yes"})
    assert s.arrive(keep) is None
    s.arrive(_gang("g1", "g", 2, 8))
    s.cluster.budgets.append((Budget("ns/keep", 0), lambda p: p.labels.get("keep") == "yes"))
    s.advance(3000.0)
    x = s.cache.get("uid-x")
    assert x is not None
    d = s.submit(pod("hp", 8, prio=100))
    # The gang (16 x 500 GPU-s) is cheaper than x (8 x 3000) but its g0 may not go.
    assert _victims(s) == ["x"]
    assert d.nominated == x.node

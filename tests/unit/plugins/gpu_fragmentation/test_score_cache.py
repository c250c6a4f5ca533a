"""GPUFragmentation's score cache: the score of a request shape is kept per row and only
rows changed since are computed again; after any sequence of binds, deletions, node
changes and target or price refreshes it equals the score computed afresh."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.core.schedule_one import Result
from gpusched.framework.cycle_state import CycleState
from gpusched.plugins.helper.gpu_state import CARD_HINT
from tests.builders import frag_sim, t4_node, t4_pod

# (cpu, milli, cards): shared, whole-card and CPU-only shapes.
SHAPES = ((1000, 470, 0), (2000, 320, 0), (4000, 0, 1), (8000, 0, 2), (500, 0, 0), (1000, 810, 0))
VARIANTS: tuple[dict[str, Any], ...] = (
    {},
    {"sosWeight": 5, "cardFitWeight": 5},
    {"cpuBalanceWeight": 5, "quantize": False},
    {"priceWeight": 0, "refreshPods": 1},
    {"priceRefreshPods": 1, "refreshPods": 1000},
)

steps = st.lists(
    st.tuples(
        st.sampled_from(("submit", "delete", "node", "drop", "probe")),
        st.integers(0, 1000),
    ),
    min_size=1,
    max_size=30,
)


def _probe(s: Any, shape: tuple[int, int, int], name: str) -> None:
    """The plugin's (cached) score of every node for a pod of `shape`, against the same
    terms computed afresh right after (the learner has then seen the pod already)."""
    plugin = s.fw.plugins["GPUFragmentation"]
    snap = s.snapshot
    rows = np.flatnonzero(snap.node_valid).astype(np.intp)
    cpu, milli, cards = shape
    pod = t4_pod(name, cpu=cpu, milli=milli, cards=cards)
    state = CycleState()
    got = plugin.score(state, pod, rows)
    if not plugin.cache.classes:
        return
    want, card = plugin._row_terms(pod, rows, snap.allowed_models(()))
    if cards == 0 and milli > 0:
        want = plugin._sos(want, rows, card, milli)
        assert np.array_equal(state.read(CARD_HINT)[rows], card)
    assert np.array_equal(got, np.clip(want, 0.0, 100.0))


@settings(max_examples=60, deadline=None)
@given(steps, st.sampled_from(VARIANTS))
def test_cached_score_equals_a_fresh_computation(
    ops: list[tuple[str, int]], args: dict[str, Any]
) -> None:
    s = frag_sim(args, *(t4_node(f"n{i}", cards=2 + i % 3) for i in range(4)))
    live: list[str] = []
    for serial, (op, a) in enumerate(ops):
        if op == "submit":
            cpu, milli, cards = SHAPES[a % len(SHAPES)]
            pod = t4_pod(f"p{serial}", cpu=cpu, milli=milli, cards=cards)
            d = s.submit(pod)
            if d.result is Result.SCHEDULED:
                live.append(pod.uid)
            else:
                s.withdraw(pod.uid)
        elif op == "delete" and live:
            s.delete(live.pop(a % len(live)))
        elif op == "node":
            # A node joins, or an existing one is relabelled (its row is stamped again).
            name = f"n{a % 6}"
            row = s.snapshot.row_of(name)
            if row < 0:
                s.events.node_changed(t4_node(name, cards=1 + a % 4))
            else:
                node = s.snapshot.node_at(row)
                s.events.node_changed(dataclasses.replace(node, labels={"x": str(a)}))
        elif op == "drop" and len(s.snapshot.rows) > 1:
            name = sorted(s.snapshot.rows)[a % len(s.snapshot.rows)]
            entries = [s.cache.get(uid) for uid in live]
            if not any(e is not None and e.node == name for e in entries):
                s.events.node_deleted(name)
        elif op == "probe":
            _probe(s, SHAPES[a % len(SHAPES)], f"probe{serial}")
    for i, shape in enumerate(SHAPES):
        _probe(s, shape, f"last{i}")


def test_a_price_re_solve_alone_recomputes_the_shared_scores() -> None:
    # No row changes between the two probes: only the card prices do.
    s = frag_sim({}, *(t4_node(f"n{i}", cards=4) for i in range(3)))
    for i, milli in enumerate((470, 320, 470)):
        assert s.submit(t4_pod(f"p{i}", milli=milli)).result is Result.SCHEDULED
    plugin = s.fw.plugins["GPUFragmentation"]
    _probe(s, (1000, 320, 0), "a")
    plugin.prices.update({320: 1.0, 650: 5.0}, plugin.prices.cpu_per_card)
    _probe(s, (1000, 320, 0), "b")

"""FragCache's FGD term per request shape: after any sequence of row changes the cached term
equals a fresh, uncached computation, and a shape seen before recomputes only the changed
rows."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from gpusched.core.cache.snapshot import Snapshot
from gpusched.model.node import Card, NodeModel
from gpusched.plugins.helper.fgd_target import FragCache, TargetClass
from tests.builders import gpu_node, snapshot

MODELS = ("A100", "V100", "T4")
Shape = tuple[int, int, int, tuple[str, ...]]
Terms = tuple[NDArray[np.intp], NDArray[np.float64], NDArray[np.int16]]
TARGETS = (
    (TargetClass(1000, 500, 1, "A100", 1.0), TargetClass(2000, 1000, 2, "", 2.0)),
    (TargetClass(4000, 250, 1, "", 3.0), TargetClass(0, 0, 0, "", 1.0)),
    (TargetClass(8000, 1000, 1, "V100|T4", 1.0), TargetClass(500, 700, 1, "", 0.5)),
)
# (cpu, milli, cards, models): shared, whole-card, CPU-only and model-constrained shapes.
SHAPES: tuple[Shape, ...] = (
    (1000, 500, 0, ()),
    (2000, 250, 0, ("V100",)),
    (4000, 1000, 2, ()),
    (8000, 1000, 1, ("A100",)),
    (500, 0, 0, ()),
    (16000, 700, 0, ()),
)

ops = st.lists(
    st.tuples(
        st.sampled_from(
            ("take", "give", "add", "remove", "relabel", "cards", "sick", "target", "ask")
        ),
        st.integers(0, 10_000),
        st.integers(0, 10_000),
    ),
    min_size=1,
    max_size=40,
)


def _node(i: int, seed: int) -> NodeModel:
    n_cards = seed % 9
    model = MODELS[seed % len(MODELS)]
    node = gpu_node(f"n{i}", cards=n_cards, model=model)
    return dataclasses.replace(node, cpu_milli=4000 * (1 + seed % 8))


def _fresh(snap: Snapshot, target: tuple[TargetClass, ...], shape: Shape) -> Terms:
    """The term computed from scratch: a new cache, all statistics recomputed."""
    cpu, milli, cards, models = shape
    cache = FragCache()
    cache.set_target(target)
    cache.refresh(snap)
    rows = np.flatnonzero(snap.node_valid).astype(np.intp)
    value = np.empty(len(rows), np.float64)
    card = np.empty(len(rows), np.int16)
    cache.compute(
        snap,
        rows,
        cpu=cpu,
        milli=milli if not cards else 1000,
        cards=cards,
        allowed=snap.allowed_models(models),
        quantize=True,
        card_by_raw=True,
        out_value=value,
        out_card=card,
    )
    return rows, value, card


def _cached(cache: FragCache, snap: Snapshot, shape: Shape) -> Terms:
    cpu, milli, cards, models = shape
    rows = np.flatnonzero(snap.node_valid).astype(np.intp)
    value, card = cache.delta(
        snap,
        rows,
        cpu=cpu,
        milli=milli if not cards else 1000,
        cards=cards,
        allowed=snap.allowed_models(models),
        quantize=True,
        card_by_raw=True,
    )
    return rows, value, card


@settings(max_examples=150, deadline=None)
@given(ops, st.integers(0, 10_000))
def test_cached_term_equals_a_fresh_computation_after_any_row_changes(
    steps: list[tuple[str, int, int]], start: int
) -> None:
    snap = snapshot(*(_node(i, start + 7 * i) for i in range(5)))
    target = TARGETS[start % len(TARGETS)]
    cache = FragCache(max_shapes=3)  # small: evictions happen within a sequence
    cache.set_target(target)
    held: list[tuple[int, int, int, int]] = []  # row, cpu, card, milli
    serial = 5
    for op, a, b in steps:
        names = sorted(snap.rows)
        name = names[a % len(names)] if names else ""
        row = snap.row_of(name) if name else -1
        if op == "take" and row >= 0 and int(snap.node_card_count[row]) > 0:
            c = b % int(snap.node_card_count[row])
            free = int(snap.card_free_milli[row, c])
            if free > 0:
                milli = 1 + b % free
                cpu = min(int(snap.node_cpu_free[row]), 500 * (1 + a % 4))
                snap.apply(row, cpu, 0, (c,), (milli,), (0,))
                held.append((row, cpu, c, milli))
        elif op == "give" and held:
            r, cpu, c, milli = held.pop(a % len(held))
            if snap.node_valid[r]:
                snap.apply(r, cpu, 0, (c,), (milli,), (0,), sign=-1)
        elif op == "add":
            snap.upsert_node(_node(serial, b))
            serial += 1
        elif op == "remove" and row >= 0:
            snap.remove_node(name)
            held = [h for h in held if h[0] != row]
        elif op == "relabel" and row >= 0:
            node = snap.node_at(row)
            snap.upsert_node(dataclasses.replace(node, labels={"gfd.timestamp": str(b)}))
        elif op == "cards" and row >= 0:
            # An inventory rewrite: the cards' model changes, their use is kept.
            node = snap.node_at(row)
            model = MODELS[b % len(MODELS)]
            cards = tuple(Card(c.index, model, c.memory_mib) for c in node.cards)
            snap.upsert_node(dataclasses.replace(node, cards=cards))
        elif op == "sick" and row >= 0 and int(snap.node_card_count[row]) > 0:
            snap.set_card_sick(row, b % int(snap.node_card_count[row]), bool(a % 2))
        elif op == "target":
            target = TARGETS[b % len(TARGETS)]
            cache.set_target(target)
        elif op == "ask" and snap.rows:
            shape = SHAPES[b % len(SHAPES)]
            _, value, card = _cached(cache, snap, shape)
            _, want_value, want_card = _fresh(snap, target, shape)
            assert np.array_equal(value, want_value)
            assert np.array_equal(card, want_card)
    for shape in SHAPES:  # every shape, cached or not, at the end
        if snap.rows:
            _, value, card = _cached(cache, snap, shape)
            _, want_value, want_card = _fresh(snap, target, shape)
            assert np.array_equal(value, want_value), shape
            assert np.array_equal(card, want_card), shape


def test_a_seen_shape_recomputes_only_the_changed_row() -> None:
    snap = Snapshot(max_cards=8, capacity=64)
    for i in range(40):
        snap.upsert_node(gpu_node(f"n{i}"))
    cache = FragCache()
    cache.set_target(TARGETS[0])
    shape = SHAPES[0]
    _cached(cache, snap, shape)
    assert (cache.terms.full, cache.terms.partial) == (1, 0)
    row = snap.row_of("n3")
    snap.apply(row, 1000, 0, (2,), (500,), (0,))
    _, value, card = _cached(cache, snap, shape)
    assert (cache.terms.full, cache.terms.partial) == (1, 1)
    assert cache.terms.computed_rows == 41  # 40 rows once, then the changed one
    _, want_value, want_card = _fresh(snap, TARGETS[0], shape)
    assert np.array_equal(value, want_value) and np.array_equal(card, want_card)
    # A new target is a new shape key: every row is computed again.
    cache.set_target(TARGETS[1])
    _cached(cache, snap, shape)
    assert cache.terms.full == 2


def test_a_new_card_model_recomputes_every_row() -> None:
    # A constraint naming a model no node has yet allows nothing; once the model appears,
    # the model count (part of the shape) makes every row's term be computed again.
    snap = Snapshot(max_cards=8, capacity=16)
    for i in range(4):
        snap.upsert_node(gpu_node(f"n{i}"))
    cache = FragCache()
    cache.set_target((TargetClass(1000, 500, 1, "T4", 1.0), TargetClass(1000, 500, 1, "", 1.0)))
    shape = (1000, 500, 0, ())
    _cached(cache, snap, shape)
    snap.upsert_node(gpu_node("t", model="T4"))
    _, value, card = _cached(cache, snap, shape)
    _, want_value, want_card = _fresh(snap, cache.classes, shape)
    assert np.array_equal(value, want_value) and np.array_equal(card, want_card)
    assert cache.terms.full == 2

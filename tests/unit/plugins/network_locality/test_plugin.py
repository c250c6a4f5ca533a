"""NetworkLocality through the real framework: a job stays in its rack."""

from __future__ import annotations

import dataclasses

from gpusched.model import keys
from gpusched.model.node import NodeModel
from tests.builders import ai_pod, ai_sim, gpu_node


def test_network_locality_keeps_a_job_in_its_rack() -> None:
    nodes = [gpu_node(f"r{r}n{i}", cards=8, rack=f"rack{r}") for r in range(3) for i in range(2)]
    s = ai_sim(*nodes)
    first = s.submit(ai_pod("j0", job="job", gpu_cards=8))
    rack = first.node[:2]
    for i in range(1, 2):
        d = s.submit(ai_pod(f"j{i}", job="job", gpu_cards=8))
        assert d.node.startswith(rack)


def _clique_node(name: str, rack: str, clique: str) -> NodeModel:
    base = gpu_node(name, cards=8, rack=rack)
    labels = dict(base.labels) | ({keys.GFD_CLIQUE: clique} if clique else {})
    return dataclasses.replace(base, labels=labels, clique=clique)


def test_a_job_prefers_its_clique_over_its_rack() -> None:
    # Two racks, two cliques, each clique with one node in each rack: wherever the first pod
    # lands, the second goes to the node of its clique in the other rack, not to its rack.
    uuid = "9b0e2d4a-0c1f-4d5e-8a7b-6c5d4e3f2a1b"
    layout = {"a": ("rack0", 1), "b": ("rack0", 2), "c": ("rack1", 1), "d": ("rack1", 2)}
    s = ai_sim(*(_clique_node(n, rack, f"{uuid}.{c}") for n, (rack, c) in layout.items()))
    first = s.submit(ai_pod("j0", job="job", gpu_cards=8)).node
    second = s.submit(ai_pod("j1", job="job", gpu_cards=8), keep_scores=True)
    rack, clique = layout[first]
    (partner,) = [n for n, (r, c) in layout.items() if c == clique and r != rack]
    (neighbour,) = [n for n, (r, c) in layout.items() if r == rack and n != first]
    assert second.node == partner
    assert second.scores is not None
    by_node = dict(
        zip(
            s.snapshot.names_of(second.scores.rows.tolist()),
            second.scores.by_plugin["NetworkLocality"].raw.tolist(),
            strict=True,
        )
    )
    # Same clique 100; same rack, another clique 75; neither (no spine labels) 0.
    (other,) = set(layout) - {first, partner, neighbour}
    assert by_node == {partner: 100.0, neighbour: 75.0, other: 0.0}


def test_without_cliques_the_rack_formula_is_unchanged() -> None:
    nodes = [gpu_node(f"r{r}n{i}", cards=8, rack=f"rack{r}") for r in range(2) for i in range(2)]
    s = ai_sim(*nodes)
    first = s.submit(ai_pod("j0", job="job", gpu_cards=8))
    second = s.submit(ai_pod("j1", job="job", gpu_cards=8), keep_scores=True)
    assert second.scores is not None
    raw = dict(
        zip(
            s.snapshot.names_of(second.scores.rows.tolist()),
            second.scores.by_plugin["NetworkLocality"].raw.tolist(),
            strict=True,
        )
    )
    same_rack = [n for n in raw if n[:2] == first.node[:2]]
    assert [raw[n] for n in same_rack] == [100.0]
    assert sorted(raw.values()) == [0.0, 0.0, 100.0]

"""NVLinkTopology through the real framework (the simulator's cache and cycles)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpusched.core.schedule_one import Decision, Result
from gpusched.kernels import nvlink_score_np
from gpusched.model.node import Card, NodeModel
from gpusched.model.pod import NVLink
from gpusched.sim.engine import Simulation
from tests.builders import ai_pod, ai_sim, card_free, gpu_node

NAME = "NVLinkTopology"


def busy(s: Simulation, node: str, *cards: int) -> None:
    """Cards taken by pods placed earlier (as the API reports them: node and gpu-ids)."""
    for c in cards:
        s.cache.add_or_update_pod(
            replace(ai_pod(f"{node}-busy{c}", gpu_cards=1), node_name=node, gpu_ids=(c,))
        )


def raw_scores(s: Simulation, d: Decision) -> dict[str, float]:
    assert d.scores is not None
    plugin = d.scores.by_plugin[NAME]
    return dict(zip(s.snapshot.names_of(d.scores.rows.tolist()), plugin.raw.tolist(), strict=True))


def test_a_preferred_pod_goes_where_it_fits_one_island() -> None:
    # "span": two free cards in each island (4 free, spanning); "fits": island 0 whole.
    s = ai_sim(gpu_node("span"), gpu_node("fits"))
    busy(s, "span", 2, 3, 6, 7)
    busy(s, "fits", 4, 5, 6, 7)
    d = s.submit(ai_pod("p", gpu_cards=4, nvlink=NVLink.PREFERRED), keep_scores=True)
    assert d.result is Result.SCHEDULED and d.node == "fits"
    assert d.alloc is not None and d.alloc.cards == (0, 1, 2, 3)
    assert raw_scores(s, d) == {"span": 0.0, "fits": 100.0}


def test_spanning_weighs_less_for_a_pod_that_did_not_ask() -> None:
    s = ai_sim(gpu_node("span"), gpu_node("fits"))
    busy(s, "span", 2, 3, 6, 7)
    busy(s, "fits", 4, 5, 6, 7)
    d = s.submit(ai_pod("p", gpu_cards=4), keep_scores=True)
    assert d.node == "fits"
    assert raw_scores(s, d) == {"span": 20.0, "fits": 100.0}


def test_a_two_card_pod_keeps_intact_islands_whole() -> None:
    # "whole": two intact islands of 4; "used": island 0 has 3 free. Taking 2 of "used"'s
    # island 0 breaks no intact island.
    s = ai_sim(gpu_node("whole"), gpu_node("used"))
    busy(s, "used", 0)
    d = s.submit(ai_pod("p", gpu_cards=2), keep_scores=True)
    assert d.node == "used"
    assert card_free(s, "used")[:4] == [0, 0, 0, 1000]
    assert raw_scores(s, d) == {"whole": 60.0 - 30.0 * 2 / 4, "used": 100.0 - 30.0 * 1 / 4}


def gfd_node(name: str) -> NodeModel:
    """A node known only from GPU Feature Discovery: 8 cards, NVLink layout unknown."""
    return replace(
        gpu_node(name), cards=tuple(Card(i, "A100", 81920) for i in range(8)), gpu_source="gfd"
    )


def test_unknown_layouts_are_neutral_and_alone_not_scored() -> None:
    s = ai_sim(gfd_node("g1"), gfd_node("g2"))
    d = s.submit(ai_pod("p", gpu_cards=4, nvlink=NVLink.PREFERRED), keep_scores=True)
    assert d.result is Result.SCHEDULED
    assert d.scores is not None and NAME not in d.scores.by_plugin  # PreScore skipped
    s = ai_sim(gfd_node("g"), gpu_node("known"))
    d = s.submit(ai_pod("q", gpu_cards=4, nvlink=NVLink.PREFERRED), keep_scores=True)
    assert raw_scores(s, d) == {"g": 50.0, "known": 100.0}


def test_single_card_and_shared_pods_are_not_scored() -> None:
    s = ai_sim(gpu_node("a"), gpu_node("b"))
    for i, req in enumerate(({"gpu_cards": 1}, {"gpu_milli": 500})):
        d = s.submit(ai_pod(f"p{i}", **req), keep_scores=True)
        assert d.result is Result.SCHEDULED
        assert d.scores is not None and NAME not in d.scores.by_plugin


def test_required_pod_gets_one_island_when_the_naive_choice_spans() -> None:
    # Cards 0, 1, 4, 5, 6, 7 free: the lowest four (0, 1, 4, 5) span both islands.
    s = ai_sim(gpu_node("n"))
    busy(s, "n", 2, 3)
    d = s.submit(ai_pod("p", gpu_cards=4, nvlink=NVLink.REQUIRED), keep_scores=True)
    assert d.alloc is not None and d.alloc.cards == (4, 5, 6, 7)
    assert np.array_equal(raw_scores(s, d)["n"], 100.0)


def test_cached_scores_follow_every_placement() -> None:
    # The plugin keeps scores per request shape and recomputes the rows that changed: after
    # every placement they equal the kernel run afresh over the feasible rows.
    s = ai_sim(*(gpu_node(f"n{i}") for i in range(4)))
    for i, k in enumerate((2, 3, 2, 1, 2, 3, 2, 2)):
        d = s.submit(ai_pod(f"p{i}", gpu_cards=k), keep_scores=True)
        assert d.result is Result.SCHEDULED
        if k < 2:
            continue
        assert d.scores is not None
        snap = s.snapshot
        fresh = np.empty(len(d.scores.rows))
        # Scores are taken before the pod's own cards: compare against the columns as they
        # were, by giving the pod's cards back for the check.
        assert d.alloc is not None
        row = d.alloc.row
        snap.card_free_milli[row, list(d.alloc.cards)] += 1000
        nvlink_score_np(
            d.scores.rows.astype(np.intp),
            snap.card_free_milli,
            snap.card_free_mem,
            snap.card_model,
            snap.card_healthy,
            snap.card_island,
            k,
            0,
            snap.allowed_models(()),
            0,
            fresh,
        )
        snap.card_free_milli[row, list(d.alloc.cards)] -= 1000
        np.testing.assert_array_equal(d.scores.by_plugin[NAME].raw, fresh)

"""The decision record explains the choice: the tie and its tie-break named, the cards and
why, each plugin's raw score with its unit, "no data" where a plugin had none; and the
`Scheduled` Event carries the top plugin scores after kube-scheduler's sentence."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import orjson

from gpusched.core.runtime.tie_break import node_rank
from gpusched.daemon.reporting import _settled
from gpusched.framework.interfaces import NO_DATA, ScorePlugin, ScoreUnit
from gpusched.kernels import choose_cards_np
from gpusched.model.node import Card, NodeModel
from gpusched.observability.explain_record import (
    EVENT_MESSAGE_LIMIT,
    cut,
    scheduled_message,
)
from gpusched.observability.logging import decision_record
from gpusched.plugins import default_registry
from gpusched.plugins.gpu_fit.why import card_list, shared_card_reason, whole_cards_reason
from gpusched.plugins.node_resources_fit import NodeResourcesFit
from gpusched.plugins.node_resources_fit.args import MOST_ALLOCATED, NodeResourcesFitArgs
from gpusched.sim.engine import Simulation
from tests.builders import GiB, ai_pod, ai_sim, gpu_node, read_temps


def _record(s: Simulation, pod_name: str, **req: object) -> tuple[dict[str, object], str]:
    d = s.submit(ai_pod(pod_name, **req), keep_scores=True)
    assert d.node, d.message
    rec = decision_record(d, names=s.snapshot.names, profile="ai-scheduler", attempt=1, result="")
    return rec, d.node


def test_a_tie_names_how_many_nodes_tied_and_the_seeded_rule() -> None:
    s = ai_sim(*(gpu_node(f"n{i}") for i in range(4)))  # identical empty nodes: all tie
    rec, node = _record(s, "a", gpu_cards=2)
    tie = rec["tie"]
    assert isinstance(tie, dict)
    assert tie["tied"] == 4
    assert tie["rule"] == "seeded node order" and tie["seed"] == 1
    assert tie["rank"] == f"{node_rank(1, node):016x}"
    # The rank is the input that decided: the chosen node ranks first of the four.
    assert node == min((f"n{i}" for i in range(4)), key=lambda n: node_rank(1, n))
    assert tie["text"] == "chosen among 4 tied nodes by seeded node order (seed 1)"
    event = scheduled_message("ns/a", node, rec)
    assert "chosen among 4 tied nodes by seeded node order" in event


def test_no_tie_is_said_in_the_record_and_not_in_the_event() -> None:
    s = ai_sim(*(gpu_node(f"n{i}") for i in range(4)))
    _record(s, "a", gpu_cards=2)
    rec, node = _record(s, "b", gpu_cards=2)  # the other half of the used island fits best
    assert rec["tie"] == {"tied": 1, "text": "the only node with the top total score"}
    assert "tied" not in scheduled_message("ns/b", node, rec)


def test_whole_cards_reason_names_the_island_and_the_island_kept_whole() -> None:
    s = ai_sim(gpu_node("n0"))  # 8 cards, islands 0-3 and 4-7
    rec, _ = _record(s, "a", gpu_cards=2)
    assert rec["cards"] == [0, 1]
    assert rec["cards_reason"] == (
        "NVLink island 0 (cards 0-3): the island with the fewest free intact cards (4) that"
        " holds 2 (first by card index among equals), keeps island 1 (4 of 4 free) whole"
    )
    rec, _ = _record(s, "b", gpu_cards=2)
    assert rec["cards"] == [2, 3]
    assert rec["cards_reason"] == (
        "NVLink island 0 (cards 0-3): the island with the fewest free intact cards (2) that"
        " holds 2, keeps island 1 (4 of 4 free) whole"
    )


def test_shared_card_reason_quotes_the_plugin_that_picked_the_card() -> None:
    s = ai_sim(gpu_node("n0"))
    rec, _ = _record(s, "a", gpu_milli=250)
    card = rec["cards"][0]  # type: ignore[index]
    assert rec["cards_reason"] == (
        f"card {card} (GPUFragmentation's pick: the card that loses least of the learnt pod"
        " mix at the card prices): 750m free left of 1000m"
    )


def test_card_reasons_without_islands_spanning_and_best_fit() -> None:
    free = np.array([1000, 1000, 1000, 1000], np.int32)
    mem = np.full(4, 81920, np.int32)
    model = np.zeros(4, np.int16)
    healthy = np.ones(4, np.bool_)
    allowed = np.ones(1, np.bool_)
    nan = np.full(4, np.nan, np.float32)
    unknown = np.full(4, -1, np.int8)
    assert whole_cards_reason((0, 1), free, mem, model, healthy, unknown, nan, 0, allowed) == (
        "cards 0,1: NVLink layout unknown (no island published), 2 intact cards by lowest index"
    )
    islands = np.array([0, 0, 1, 1], np.int8)
    hot = np.array([60, 70, 61, 65], np.float32)
    assert whole_cards_reason((0, 2, 3), free, mem, model, healthy, islands, hot, 0, allowed) == (
        "cards 0,2,3: no NVLink island has 3 free intact cards, so they span islands 0,1;"
        " the coolest eligible cards there (hottest 65 °C)"
    )
    assert shared_card_reason(3, 500, 250, None) == (
        "best-fit card 3 (the least share left over among the cards that fit): 250m free left"
        " of 500m"
    )
    assert card_list([0, 1, 2, 3, 5, 7, 8]) == "0-3,5,7,8"


def test_every_score_plugin_declares_its_raw_score_unit() -> None:
    scorers = [spec for spec in default_registry() if callable(getattr(spec.cls, "score", None))]
    assert len(scorers) >= 18
    for spec in scorers:
        unit = getattr(spec.cls, "score_unit", None)
        assert isinstance(unit, ScoreUnit), f"{spec.name} declares no score_unit"
        assert unit.unit and len(unit.meaning) > 20, spec.name
        # Documented where the plugin is: its README quotes the unit it declares.
        module = sys.modules[spec.cls.__module__].__file__
        assert module is not None
        readme = (Path(module).parent / "README.md").read_text()
        assert f"`score_units.{spec.name}`" in readme, spec.name
        assert f"**{unit.unit}**" in readme, spec.name
    most = NodeResourcesFit(
        dataclasses.replace(
            NodeResourcesFitArgs(),
            scoring_strategy=dataclasses.replace(
                NodeResourcesFitArgs().scoring_strategy, type=MOST_ALLOCATED
            ),
        ),
        ai_sim(gpu_node("n0")).handle,
    )
    assert isinstance(most, ScorePlugin)
    assert "requested" in most.score_unit.meaning
    assert "free" in NodeResourcesFit.score_unit.meaning


def test_the_record_gives_units_raw_scores_and_no_data() -> None:
    s = ai_sim(gpu_node("n0"), gpu_node("n1"))
    rec, _ = _record(s, "a", gpu_cards=2)
    scored = rec["chosen_scores"]
    assert isinstance(scored, dict)
    # No telemetry: Thermal and PowerHeadroom scored 50 everywhere as a stand-in.
    assert scored["Thermal"] == "no data" and scored["PowerHeadroom"] == "no data"
    assert isinstance(scored["GPUFragmentation"], float)
    assert list(scored)[-2:] == ["Thermal", "PowerHeadroom"]  # numbers first
    units = rec["score_units"]
    assert isinstance(units, dict)
    assert set(units) == set(scored)
    assert units["Thermal"] == "points (0-100)"
    meanings = s.fw.score_units  # what the daemon's `started` line logs
    assert "not a GPU count" in meanings["GPUFragmentation"]["meaning"]
    orjson.dumps(rec, option=orjson.OPT_SERIALIZE_NUMPY)  # the log line serialises


def test_thermal_with_a_reading_is_a_number() -> None:
    s = ai_sim(gpu_node("n0"), gpu_node("n1"))
    read_temps(s, {"n0": 68.0, "n1": 68.0})
    rec, _ = _record(s, "a", gpu_cards=2)
    scored = rec["chosen_scores"]
    assert isinstance(scored, dict)
    # 68 °C + 40 x 2/8 = 78 °C projected: (82 - 78) / (82 - 75) of the 100 points.
    assert scored["Thermal"] == round(100 * 4 / 7, 3)
    assert scored["PowerHeadroom"] == "no data"


def test_nvlink_topology_has_no_data_on_a_node_without_islands() -> None:
    gfd = NodeModel(
        name="gfd",
        cpu_milli=64_000,
        memory_bytes=512 * GiB,
        pods=110,
        cards=tuple(Card(i, "A100", 81920) for i in range(8)),
    )
    s = ai_sim(gpu_node("n0"), gfd)
    d = s.submit(ai_pod("a", gpu_cards=2), keep_scores=True)
    tests = d.state.get(NO_DATA)
    assert tests is not None
    assert tests["NVLinkTopology"](s.snapshot.row_of("gfd"), -1) is True
    assert tests["NVLinkTopology"](s.snapshot.row_of("n0"), -1) is False


def test_the_scheduled_event_keeps_kube_schedulers_sentence_and_adds_scores() -> None:
    s = ai_sim(gpu_node("n0"))
    rec, node = _record(s, "a", gpu_cards=2)
    event = scheduled_message("ns/a", node, rec)
    total = next(t["total"] for t in rec["top"] if t["node"] == node)  # type: ignore[union-attr]
    frag = rec["chosen_scores"]["GPUFragmentation"]  # type: ignore[index]
    assert event.startswith(f"Successfully assigned ns/a to {node} (cards 0,1; score {total:.1f}: ")
    assert f"GPUFragmentation {frag:.1f}" in event
    assert event.endswith("Thermal no data, PowerHeadroom no data)")
    settled = scheduled_message("ns/a", node, rec, "the Binding's answer was lost")
    assert settled.endswith("; the Binding's answer was lost)")


def test_the_event_message_stays_under_the_api_limit() -> None:
    s = ai_sim(gpu_node("n0"))
    rec, node = _record(s, "a", gpu_cards=2)
    long_key = "ns/" + "p" * 2000
    event = scheduled_message(long_key, node, rec)
    assert len(event.encode()) <= EVENT_MESSAGE_LIMIT
    assert event.startswith("Successfully assigned ns/ppp") and event.endswith("…")
    assert cut("é" * 600, 1024).encode().decode() == cut("é" * 600, 1024)  # no split char
    assert len(cut("é" * 600, 1024).encode()) <= 1024


def test_a_cpu_pod_has_no_cards_reason_but_its_tie() -> None:
    s = ai_sim(gpu_node("n0"))
    rec, _ = _record(s, "a")  # CPU-only
    assert rec["cards"] == [] and "cards_reason" not in rec
    assert rec["tie"] == {"tied": 1, "text": "the only node with the top total score"}


def test_whole_card_words_agree_with_choose_cards_on_random_nodes() -> None:
    """The words restate the kernel's rule for the cards it returned: the named island is
    the chosen cards' island and no other island holding k has fewer free intact cards."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        c = int(rng.integers(2, 9))
        free = rng.choice([0, 250, 1000], size=(1, c), p=[0.2, 0.2, 0.6]).astype(np.int32)
        mem = np.where(free == 1000, 81920, 20000).astype(np.int32)
        total = np.full((1, c), 81920, np.int32)
        model = np.zeros((1, c), np.int16)
        healthy = np.ones((1, c), np.bool_)
        island = (np.arange(c) // int(rng.integers(1, 5)))[None, :].astype(np.int8)
        temp = np.full((1, c), np.nan, np.float32)
        k = int(rng.integers(1, 5))
        allowed = np.ones(1, np.bool_)
        cards = choose_cards_np(
            free, mem, total, model, healthy, island, temp, 0, k, 0, 0, allowed, 0
        )
        if len(cards) == 0:
            continue
        words = whole_cards_reason(
            tuple(int(x) for x in cards),
            free[0],
            mem[0],
            model[0],
            healthy[0],
            island[0],
            temp[0],
            0,
            allowed,
        )
        isl = {int(island[0, x]) for x in cards}
        if len(isl) > 1:
            assert "span islands" in words, words
            continue
        (i,) = isl
        assert words.startswith(f"NVLink island {i} "), words
        intact = free[0] == 1000
        here = int(np.count_nonzero(intact & (island[0] == i)))
        for other in set(island[0].tolist()) - {i}:
            n = int(np.count_nonzero(intact & (island[0] == other)))
            assert not (k <= n < here), (words, free, island, k)


def test_the_event_keeps_how_an_unknown_binding_was_settled() -> None:
    rec = {"node": "n0", "cards": [0, 1]}
    landed = "the Binding's answer was lost (timeout); the pod shows it landed"
    assert _settled(f"bound to n0 (cards 0,1) ({landed})", rec) == landed
    assert _settled("bound to n0 (cards 0,1)", rec) == ""
    assert _settled("bound to n0", {"node": "n0", "cards": []}) == ""

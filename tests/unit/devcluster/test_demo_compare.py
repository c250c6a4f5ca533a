"""`make demo`'s pure parts: the workload's two variants, the side-by-side numbers, the
verdict, the per-pod table and the readers of pods and decision records."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import yaml
from rich.console import Console

from gpusched.devcluster import demo, demo_compare, demo_run, demo_workload
from gpusched.devcluster.configs import kube_scheduler_config
from gpusched.devcluster.demo_workload import GPUSCHED, KUBE_SCHEDULER, Part
from gpusched.devcluster.nodes import read_openb_csv
from gpusched.kube import JSON
from gpusched.model import keys
from gpusched.observability.explain_record import scheduled_message
from gpusched.plugins.gpu_fit.why import shared_card_reason, whole_cards_reason

GANG = Part("train", "Job", 2, 4000, "16", "128Gi", wave=2, gang=True)
SHARED = Part("inference", "Deployment", 4, 500, "2", "8Gi", wave=1)
PARTS = (SHARED, GANG)
CAPACITY = {"n0": 8, "n1": 8}


def pod(
    name: str,
    group: str,
    node: str = "",
    *,
    need: int = 0,
    gpus: int = 0,
    ids: str | None = None,
    phase: str = "Running",
    condition: tuple[str, str] | None = None,
    podgroup: str = "",
) -> JSON:
    ann = {keys.GPU_IDS: ids} if ids is not None else {}
    resources: JSON = {"limits": {keys.GPU_RESOURCE: str(gpus)}} if gpus else {}
    spec: JSON = {"containers": [{"name": "m", "resources": resources}]}
    if node:
        spec["nodeName"] = node
    if podgroup:
        spec["schedulingGroup"] = {"podGroupName": podgroup}
    status: JSON = {"phase": phase if node else "Pending"}
    if condition:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": condition[0],
                "message": condition[1],
            }
        ]
    labels = {demo_workload.GROUP_LABEL: group, demo_workload.NEED_LABEL: str(need)}
    return {
        "metadata": {"name": name, "labels": labels, "annotations": ann},
        "spec": spec,
        "status": status,
    }


def test_the_two_variants_differ_only_in_how_a_share_and_the_scheduler_are_asked() -> None:
    for part in demo_workload.PARTS:
        ours = demo_workload.manifest(part, GPUSCHED)
        theirs = demo_workload.manifest(part, KUBE_SCHEDULER)
        a, b = ours["spec"]["template"], theirs["spec"]["template"]
        assert a["spec"]["schedulerName"] == "ai-scheduler"
        assert b["spec"]["schedulerName"] == "default-scheduler"
        ra, rb = a["spec"]["containers"][0]["resources"], b["spec"]["containers"][0]["resources"]
        assert ra["requests"] == rb["requests"]
        assert a["metadata"]["labels"] == b["metadata"]["labels"]
        if 0 < part.milli < 1000:
            assert a["metadata"]["annotations"] == {keys.GPU_MILLI: str(part.milli)}
            assert "limits" not in ra
            assert rb["limits"] == {keys.GPU_RESOURCE: "1"}  # kube-scheduler cannot share
        else:
            assert ra.get("limits") == rb.get("limits")
        if part.gang:
            assert ours["spec"]["completionMode"] == theirs["spec"]["completionMode"] == "Indexed"
        if part.kind == "Job":
            ann = b["metadata"]["annotations"]
            assert ann[demo_workload.KWOK_COMPLETE_DELAY] == demo_workload.RUN_FOR


def test_the_workload_has_a_gang_shared_replicas_cpu_pods_and_fits_the_fleet_by_count() -> None:
    parts = demo_workload.PARTS
    assert sum(1 for p in parts if p.gang) == 1
    assert any(0 < p.milli < 1000 and p.kind == "Deployment" for p in parts)
    assert any(p.milli == 0 for p in parts)
    cards = sum(s.gpus for s in demo_workload.demo_fleet())
    # Counted as whole cards (kube-scheduler's view) it fits: what fails is fragmentation.
    whole = sum(p.pods * max(p.cards, 1 if p.milli else 0) for p in parts)
    assert whole <= cards, (whole, cards)
    assert [p.wave for p in parts] == sorted(p.wave for p in parts)
    assert demo_workload.waves()[-1] == [p for p in parts if p.gang]


def test_the_fleet_csv_reads_back_as_the_same_nodes(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    fleet = demo_workload.demo_fleet()
    path.write_text(demo_workload.fleet_csv(fleet))
    assert read_openb_csv(path) == fleet


def test_held_cards_counts_a_shared_card_once_and_a_whole_card_request_as_cards() -> None:
    pods = [
        pod("a", "inference", "n0", ids="0"),
        pod("b", "inference", "n0", ids="0"),  # the same card, shared
        pod("c", "train", "n0", ids="4,5"),
        pod("d", "train", "n1", gpus=3),  # kube-scheduler's kind: no card ids
        pod("e", "train", "n1", gpus=4, phase="Succeeded"),  # finished: holds nothing
        pod("f", "train", "n1", gpus=20),  # capped at the node's 8
        pod("g", "train", "elsewhere", gpus=2),
    ]
    assert demo_compare.held_cards(pods[:5], CAPACITY) == {"n0": 3, "n1": 3}
    assert demo_compare.held_cards(pods, CAPACITY) == {"n0": 3, "n1": 8}


def _ours() -> list[JSON]:
    return [
        pod("i0", "inference", "n0", need=500, ids="0"),
        pod("i1", "inference", "n0", need=500, ids="0"),
        pod("i2", "inference", "n0", need=500, ids="1"),
        pod("i3", "inference", "n0", need=500, ids="1"),
        pod("t0", "train", "n0", need=4000, ids="2,3,4,5"),
        pod("t1", "train", "n1", need=4000, ids="0,1,2,3"),
    ]


def _theirs() -> list[JSON]:
    refused = ("Unschedulable", "0/2 nodes are available")
    return [
        pod("i0", "inference", "n0", need=500, gpus=1),
        pod("i1", "inference", "n1", need=500, gpus=1),
        pod("i2", "inference", "n0", need=500, gpus=1),
        pod("i3", "inference", "n1", need=500, gpus=1),
        pod("t0", "train", need=4000, gpus=4, condition=refused),
        pod("t1", "train", need=4000, gpus=4, condition=refused),
    ]


def test_outcome_measures_held_used_started_pending_and_fragmentation() -> None:
    before_ours = _ours()[:4]
    ours = demo_compare.outcome(_ours(), CAPACITY, PARTS, before_gang=before_ours)
    assert (ours.held_total, ours.used_milli, ours.pending) == (10, 10_000, 0)
    assert ours.used_share == 1.0
    assert ours.bound == {"inference": 4, "train": 2}
    assert ours.free_before_gang() == 14
    assert ours.fragmented_before_gang() == 0  # 6 and 8 free: each holds a 4-GPU member
    assert ours.largest_free_block == 4
    theirs = demo_compare.outcome(_theirs(), CAPACITY, PARTS, before_gang=_theirs())
    assert (theirs.held_total, theirs.used_milli, theirs.pending) == (4, 2000, 2)
    assert theirs.used_share == 0.5
    assert theirs.fragmented_before_gang() == 0
    # Three 2-card pods on each node leave 2 free on each: both stranded for a 4-GPU member.
    spread = [pod(f"x{i}", "inference", f"n{i % 2}", gpus=2) for i in range(6)]
    assert (
        demo_compare.outcome(spread, CAPACITY, PARTS, before_gang=spread).fragmented_before_gang()
        == 4
    )


def test_rows_and_verdict_count_outcomes_not_rows() -> None:
    ours = demo_compare.outcome(_ours(), CAPACITY, PARTS, before_gang=_ours()[:4])
    theirs = demo_compare.outcome(_theirs(), CAPACITY, PARTS, before_gang=_theirs())
    rows = demo_compare.rows(ours, theirs)
    by = {r.short or r.metric: r for r in rows}
    assert by["gang train"].ours == "2/2 started"
    assert by["gang train"].theirs == "0/2 (not started)"
    assert by["gang train"].winner == "gpusched"
    assert by["pending"].winner == "gpusched"  # 0 < 2, and fewer is better
    assert by["replicas"].winner == "="
    assert by["largest free block"].winner == "kube-scheduler"  # 4 < 6: not claimed
    assert by["GPU cards held"].winner == ""  # shown, not judged
    # Rows of one outcome sit together, in OUTCOMES order.
    seen = [r.outcome for r in rows]
    assert sorted(set(seen), key=seen.index) == list(demo_compare.OUTCOMES)
    assert seen == sorted(seen, key=demo_compare.OUTCOMES.index)
    # The gang that did not start moves three rows (work placed, gang, pending): one outcome.
    line = demo_compare.verdict(rows)
    assert line == (
        "Verdict: mixed: gpusched better on 2 of 3 outcomes (work running: GPU work placed,"
        " gang train, pending; card use: use of held cards), kube-scheduler better on 1"
        " (fragmentation: largest free block)."
    ), line
    # The same numbers the other way round: the verdict turns.
    flipped = demo_compare.verdict(demo_compare.rows(theirs, ours))
    assert flipped.startswith(
        "Verdict: mixed: gpusched better on 1 of 3 outcomes (fragmentation: largest free"
    ), flipped
    # Better on some outcomes and worse on none: ahead, the equal outcome named.
    ahead = [r for r in rows if r.short != "largest free block"]
    line = demo_compare.verdict(ahead)
    assert line.startswith("Verdict: gpusched ahead: better on 2 of 3 outcomes "), line
    assert line.endswith("worse on none, equal on 1 (fragmentation)."), line
    behind = [r for r in demo_compare.rows(theirs, ours) if r.short != "largest free block"]
    assert demo_compare.verdict(behind).startswith("Verdict: kube-scheduler ahead: ")
    # Identical outcomes: no difference claimed.
    same = demo_compare.verdict(demo_compare.rows(ours, ours))
    assert same == "Verdict: no difference on any of the 3 outcomes."
    # The legend explains every judged row, and how the verdict counts.
    legend = " ".join(n for n, _ in demo_compare.LEGEND)
    for r in rows:
        if r.better is not None:
            assert r.short.split()[0] in legend, r.short
    assert "counts outcomes, not rows" in dict(demo_compare.LEGEND)["Verdict"]


def test_an_outcome_whose_rows_disagree_is_split_not_won() -> None:
    frag = demo_compare.FRAGMENTATION
    rows = [
        demo_compare.Row("f", "0", "3", 0, 3, demo_compare.LOWER, "fragmented cards", frag),
        demo_compare.Row("b", "2", "6", 2, 6, demo_compare.HIGHER, "largest free block", frag),
        demo_compare.Row("u", "90%", "70%", 0.9, 0.7, demo_compare.HIGHER, "use", "card use"),
    ]
    judged = demo_compare.judge(rows)
    assert [(j.outcome, j.winner) for j in judged] == [(frag, "split"), ("card use", "gpusched")]
    line = demo_compare.verdict(rows)
    assert line == (
        "Verdict: gpusched ahead: better on 1 of 2 outcomes (card use: use), worse on none,"
        " split on 1 (fragmentation: fragmented cards to gpusched, largest free block to"
        " kube-scheduler)."
    ), line
    assert demo_compare.verdict(rows[:2]).startswith("Verdict: neither ahead: split on 1 of 1")


def test_no_verdict_when_a_wave_did_not_settle() -> None:
    ours = demo_compare.outcome(_ours(), CAPACITY, PARTS, before_gang=_ours()[:4])
    theirs = demo_compare.outcome(_theirs(), CAPACITY, PARTS, before_gang=_theirs())
    rows = demo_compare.rows(ours, theirs)
    line = demo_compare.verdict(rows, ["wave 2/2 (train) under kube-scheduler"])
    assert line.startswith(
        "Verdict: not measured: wave 2/2 (train) under kube-scheduler did not settle"
    ), line
    assert "gpusched better" not in line and "ahead" not in line
    out = io.StringIO()
    Console(file=out, width=160).print(demo_compare.render(rows, title="t", judged=False))
    assert "better" not in out.getvalue() and "gpusched" in out.getvalue()


def test_pods_of_other_namespaces_holding_or_asking_for_gpus_are_found() -> None:
    def ns(p: JSON, namespace: str) -> JSON:
        p["metadata"]["namespace"] = namespace
        return p

    shared = ns(pod("s", "x"), "team")
    shared["metadata"]["annotations"][keys.GPU_MILLI] = "500"
    pods = [
        ns(pod("mine", "x", "n0", gpus=2), "gpusched-demo"),  # the demo's own
        ns(pod("a", "x", "n0", ids="3"), "team"),  # holds a card (gpusched's annotation)
        ns(pod("b", "x", "n1", gpus=1), "team"),  # holds a card (device plugin's count)
        ns(pod("c", "x", gpus=1), "team"),  # asks, no node yet
        shared,  # asks for a share, no node yet
        ns(pod("d", "x", "n1", gpus=1, phase="Succeeded"), "team"),  # done: holds nothing
        ns(pod("e", "x", "n1"), "team"),  # CPU only
        ns(pod("f", "x", "elsewhere", gpus=1), "team"),  # not on the demo's nodes
    ]
    found = demo_compare.foreign_gpu_pods(pods, CAPACITY, "gpusched-demo")
    assert found == ["team/a", "team/b", "team/c", "team/s"]
    assert demo_compare.foreign_gpu_pods(pods[:1], CAPACITY, "gpusched-demo") == []


def test_the_rendered_table_has_one_line_per_row() -> None:
    ours = demo_compare.outcome(_ours(), CAPACITY, PARTS, before_gang=_ours()[:4])
    rows = demo_compare.rows(ours, ours)
    out = io.StringIO()
    Console(file=out, width=160).print(demo_compare.render(rows, title="t"))
    text = out.getvalue()
    assert all(r.metric.strip() in text for r in rows)


def test_final_waits_out_a_gang_member_not_ready_and_gangs_bind_whole() -> None:
    assert demo_run.final(pod("a", "train", "n0"))
    assert not demo_run.final(pod("a", "train", "n0", phase="Pending"))  # bound, not started
    assert demo_run.final(pod("a", "train", condition=("Unschedulable", "no")))
    assert not demo_run.final(pod("a", "train", condition=("NotReadyForScheduling", "1 of 4")))
    assert not demo_run.final(pod("a", "train"))
    half = {
        "a": pod("a", "train", "n0", podgroup="g"),
        "b": pod("b", "train", podgroup="g"),
    }
    assert not demo_run.gangs_whole(half)
    half["b"] = pod("b", "train", "n1", podgroup="g")
    assert demo_run.gangs_whole(half)
    assert demo_run.settled_wave(3)(half) is False  # a pod of the wave is still missing


def test_pod_table_groups_by_controller_and_shortens_long_groups() -> None:
    pods = {p["metadata"]["name"]: p for p in _ours() + _theirs()[4:5]}
    pods["t9"] = pod("t9", "train", condition=("Unschedulable", "0/2 nodes: gang needs 2"))
    record = {
        "pod": "ns/i0",
        "node": "n0",
        "feasible": 2,
        "top": [{"node": "n0", "total": 50.0}],
        "chosen_scores": {"GPUFit": 50.0},
    }
    out = io.StringIO()
    table = demo_run.pod_table(pods, {"ns/i0": record}, "ns")
    Console(file=out, width=200).print(table)
    text = out.getvalue()
    assert text.count("inference") == 1  # the controller named once
    assert "... 1 more: 1 on 1 node(s)" in text  # i3, after three examples
    assert "score 50.0: GPUFit 50.0; best of 2" in text
    assert "pending" in text and "gang needs 2" in text


def _record(**extra: object) -> JSON:
    """A decision record as the daemon writes it (observability/logging.py), cut to what
    `why` reads: `top` carries weighted normalised scores, `chosen_scores` the raw ones."""
    return {
        "node": "n1",
        "feasible": 3,
        "top": [
            {"node": "n0", "total": 90.0, "scores": {}},
            {
                "node": "n1",
                "total": 80.0,
                "scores": {
                    "A": {"weight": 2, "normalized": 30, "raw": 7},
                    "Thermal": {"weight": 1, "normalized": 50, "raw": 50},
                    "B": {"weight": 0.5, "normalized": 40, "raw": 400},
                },
            },
        ],
        # Best contribution first, "no data" last: Thermal's 50 was a neutral stand-in.
        "chosen_scores": {"A": 7.0, "B": 400.0, "Thermal": "no data"},
        **extra,
    }


def test_why_shows_the_raw_scores_of_the_event_and_never_a_no_data_plugin() -> None:
    assert demo.why(_record()) == "score 80.0: A 7.0, B 400.0; best of 3"
    # The Scheduled Event names the same plugins with the same numbers.
    message = scheduled_message("ns/p", "n1", _record())
    assert "score 80.0: A 7.0, B 400.0, Thermal no data" in message
    # Thermal would be a reason by its weighted stand-in (50 > B's 20): it is not one.
    only_no_data = _record(chosen_scores={"Thermal": "no data", "A": 7.0})
    assert demo.why(only_no_data, terms=2) == "score 80.0: A 7.0; best of 3"
    tie = {"tied": 4, "rule": "seeded node order", "seed": 0, "text": "chosen among 4"}
    reason = shared_card_reason(2, 1000, 500, None)
    line = demo.why(_record(tie=tie, cards_reason=reason))
    assert line == ("score 80.0: A 7.0, B 400.0; best of 3, 4 tied; cards: best fit, 500m left")
    assert demo.why(_record(tie={"tied": 1, "text": "the only node"})).endswith("best of 3")
    assert demo.why({"node": "n1", "top": []}) == ""
    assert demo.why({"node": "n1", "top": [{"node": "n1"}]}) == "score; best of 0"


def test_cards_in_brief_cuts_each_of_gpufits_wordings_to_its_rule() -> None:
    def row(free: list[int], island: list[int]) -> tuple[np.ndarray, ...]:
        n = len(free)
        return (
            np.array(free, np.int32),
            np.full(n, 80_000, np.int32),
            np.zeros(n, np.int16),
            np.ones(n, np.bool_),
            np.array(island, np.int8),
            np.full(n, np.nan, np.float32),
        )

    free = [1000] * 8
    allowed = np.ones(1, np.bool_)
    # Island 0 has 3 free cards, island 1 all 4: two cards go to island 0, island 1 kept.
    tight = whole_cards_reason((1, 2), *row([0, *free[1:]], [0] * 4 + [1] * 4), 0, allowed)
    assert demo.cards_in_brief(tight) == "tightest NVLink island 0", tight
    # One island on the node (the demo's nodes): no choice of island, nothing to say.
    alone = whole_cards_reason((1, 2), *row(free, [0] * 8), 0, allowed)
    assert alone.startswith("NVLink island 0 (cards 0-7)") and demo.cards_in_brief(alone) == ""
    span = whole_cards_reason(
        (2, 3, 4, 5), *row([0, 0] + [1000] * 4 + [0, 0], [0] * 4 + [1] * 4), 0, allowed
    )
    assert demo.cards_in_brief(span) == "span NVLink islands 0,1", span
    unknown = whole_cards_reason((0,), *row(free, [-1] * 8), 0, allowed)
    assert demo.cards_in_brief(unknown) == "NVLink layout unknown", unknown
    pick = shared_card_reason(0, 750, 500, "GPUFragmentation's pick: the card that loses least")
    assert demo.cards_in_brief(pick) == "GPUFragmentation's pick, 250m left", pick
    assert demo.cards_in_brief(shared_card_reason(3, 500, 250, None)) == "best fit, 250m left"
    assert demo.cards_in_brief("some new wording: details") == "some new wording"
    assert demo.cards_in_brief("") == ""


def test_the_stock_kube_scheduler_config_is_the_default_profile(tmp_path: Path) -> None:
    stock = yaml.safe_load(kube_scheduler_config(tmp_path / "k", stock=True))
    assert stock["profiles"] == [{"schedulerName": "default-scheduler"}]
    assert "percentageOfNodesToScore" not in stock
    tuned = yaml.safe_load(kube_scheduler_config(tmp_path / "k"))
    strategy = tuned["profiles"][0]["pluginConfig"][0]["args"]["scoringStrategy"]
    assert strategy["type"] == "MostAllocated"

"""`make demo`'s pure parts: the workload's two variants, the side-by-side numbers, the
verdict, the per-pod table and the readers of pods and decision records."""

from __future__ import annotations

import io
from pathlib import Path

import yaml
from rich.console import Console

from gpusched.devcluster import demo, demo_compare, demo_run, demo_workload
from gpusched.devcluster.configs import kube_scheduler_config
from gpusched.devcluster.demo_workload import GPUSCHED, KUBE_SCHEDULER, Part
from gpusched.devcluster.nodes import read_openb_csv
from gpusched.kube import JSON
from gpusched.model import keys

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


def test_rows_and_verdict_name_only_what_the_numbers_show() -> None:
    ours = demo_compare.outcome(_ours(), CAPACITY, PARTS, before_gang=_ours()[:4])
    theirs = demo_compare.outcome(_theirs(), CAPACITY, PARTS, before_gang=_theirs())
    rows = demo_compare.rows(ours, theirs)
    by = {r.short or r.metric: r for r in rows}
    assert by["gang train"].ours == "2/2 started"
    assert by["gang train"].theirs == "0/2 (not started)"
    assert by["gang train"].winner == "gpusched"
    assert by["pending"].winner == "gpusched"  # 0 < 2, and fewer is better
    assert by["replicas"].winner == "="
    assert by["largest free block"].winner == "kube-scheduler"  # 4 < 8: not claimed
    assert by["GPU cards held"].winner == ""  # shown, not judged
    line = demo_compare.verdict(rows)
    assert line.startswith("Verdict: mixed: gpusched better on "), line
    assert "kube-scheduler better on 1 (largest free block)" in line
    assert "equal on 3 (Jobs, replicas, fragmentation)" in line
    # The same numbers the other way round: the verdict turns.
    flipped = demo_compare.verdict(demo_compare.rows(theirs, ours))
    assert "gpusched better on 1 of" in flipped and "(largest free block)" in flipped
    # Better on some rows and worse on none: ahead, and the rows are named.
    ahead = [r for r in rows if r.short != "largest free block"]
    line = demo_compare.verdict(ahead)
    assert line.startswith("Verdict: gpusched ahead: better on "), line
    assert "worse on none" in line and "gang train" in line
    behind = demo_compare.verdict(demo_compare.rows(theirs, ours)[:5])
    assert behind.startswith("Verdict: kube-scheduler ahead: "), behind
    # Identical outcomes: no difference claimed.
    same = demo_compare.verdict(demo_compare.rows(ours, ours))
    assert same == "Verdict: no difference on any of the 8 judged rows."
    # The legend explains every judged row.
    legend = " ".join(n for n, _ in demo_compare.LEGEND)
    for r in rows:
        if r.better is not None:
            assert r.short.split()[0] in legend, r.short


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
        "top": [
            {"node": "n0", "total": 50.0, "scores": {"GPUFit": {"weight": 1, "normalized": 50}}}
        ],
    }
    out = io.StringIO()
    table = demo_run.pod_table(pods, {"ns/i0": record}, "ns")
    Console(file=out, width=200).print(table)
    text = out.getvalue()
    assert text.count("inference") == 1  # the controller named once
    assert "... 1 more: 1 on 1 node(s)" in text  # i3, after three examples
    assert "score 50.0 (GPUFit 50.0) best of 2" in text
    assert "pending" in text and "gang needs 2" in text


def test_why_reads_records_with_more_keys_or_fewer() -> None:
    record = {
        "node": "n1",
        "feasible": 3,
        "tie_break": "random among 2",  # a key another version adds
        "top": [
            {"node": "n0", "total": 9.0, "scores": {}},
            {
                "node": "n1",
                "total": 80.0,
                "tied": True,
                "scores": {
                    "A": {"weight": 2, "normalized": 30, "raw": 1, "unit": "x"},
                    "B": {"weight": 0.5, "normalized": 40},
                    "C": {"normalized": 10},  # no weight: counted once
                    "D": "not a score",
                },
            },
        ],
    }
    assert demo.why(record) == "score 80.0 (A 60.0, B 20.0) best of 3"
    assert demo.why({"node": "n1", "top": []}) == ""


def test_the_stock_kube_scheduler_config_is_the_default_profile(tmp_path: Path) -> None:
    stock = yaml.safe_load(kube_scheduler_config(tmp_path / "k", stock=True))
    assert stock["profiles"] == [{"schedulerName": "default-scheduler"}]
    assert "percentageOfNodesToScore" not in stock
    tuned = yaml.safe_load(kube_scheduler_config(tmp_path / "k"))
    strategy = tuned["profiles"][0]["pluginConfig"][0]["args"]["scoringStrategy"]
    assert strategy["type"] == "MostAllocated"

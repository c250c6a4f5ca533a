"""VolumeBinding: kube's volume binder (volume_binding_test.go / binder_test.go cases) over
an in-memory storage port."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from gpusched.framework import CycleState
from gpusched.framework.status import Code, Status
from gpusched.model.pod import PodInfo
from gpusched.model.selector import Requirement
from gpusched.model.volume import (
    ClaimRef,
    NodeSelectorTerm,
    PodVolume,
    TopologyTerm,
)
from gpusched.plugins.helper.volumes import find_matching_volume
from gpusched.plugins.volume_binding import VolumeBinding
from gpusched.plugins.volume_binding.args import VolumeBindingArgs
from gpusched.plugins.volume_binding.plugin import (
    _STATE,
    REASON_BIND_CONFLICT,
    REASON_NODE_CONFLICT,
    REASON_PV_NOT_EXIST,
    UNBOUND_IMMEDIATE,
)
from tests.builders import (
    HOSTNAME,
    GiB,
    all_rows,
    bound_claim,
    claim,
    host,
    node,
    passing,
    pod,
    pv,
    pvc_volume,
    reasons_by_node,
    snapshot,
    storage_class,
)
from tests.fakes import FakeHandle, FakeVolumes


def setup(
    *objs: object, nodes: tuple[str, ...] = ("n1", "n2", "n3"), timeout: int = 600
) -> tuple[VolumeBinding, FakeVolumes, FakeHandle]:
    vols = FakeVolumes()
    vols.add(*objs)
    handle = FakeHandle(snapshot(*(host(n) for n in nodes)), volumes=vols)
    return VolumeBinding(VolumeBindingArgs(timeout), handle), vols, handle


def web(*claims: str) -> PodInfo:
    return pod("web", volumes=tuple(pvc_volume(c, f"v{i}") for i, c in enumerate(claims)))


def run_filter(
    plugin: VolumeBinding, handle: FakeHandle, p: PodInfo
) -> tuple[CycleState, dict[str, str], list[str]]:
    state = CycleState()
    _, st = plugin.pre_filter(state, p)
    assert st.is_success(), st
    mask = all_rows(handle.snapshot)
    res = plugin.filter(state, p, mask)
    assert res.unresolvable is True or res.feasible is mask  # the fast path: all pass
    return state, reasons_by_node(handle.snapshot, mask, res), passing(handle.snapshot, res)


def test_pre_filter_skips_pods_without_claims() -> None:
    plugin, _, _ = setup()
    assert plugin.pre_filter(CycleState(), pod("p"))[1].is_skip()


@pytest.mark.parametrize(
    ("objs", "message"),
    [
        ((), 'persistentvolumeclaim "data" not found'),
        ((claim("data", deleting=True),), 'persistentvolumeclaim "data" is being deleted'),
        ((claim("data", ""),), UNBOUND_IMMEDIATE),  # no class: Immediate
        ((claim("data", "missing-class"),), UNBOUND_IMMEDIATE),  # unknown class: Immediate
        (
            (claim("data", "std"), storage_class("std", "csi.x", mode="Immediate")),
            UNBOUND_IMMEDIATE,
        ),
        # Pre-bound by the user but not bound yet: the PV controller's job.
        ((claim("data", volume_name="pv1"), storage_class()), UNBOUND_IMMEDIATE),
    ],
)
def test_pre_filter_rejects_unresolvable(objs: tuple[object, ...], message: str) -> None:
    plugin, _, _ = setup(*objs)
    _, st = plugin.pre_filter(CycleState(), web("data"))
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.reasons == (message,)


def test_a_claim_with_a_malformed_field_says_which() -> None:
    bad = claim(
        "data", errors=("spec.selector.matchExpressions[0].operator: Unsupported value: 'Near'",)
    )
    plugin, _, _ = setup(bad, storage_class())
    _, st = plugin.pre_filter(CycleState(), web("data"))
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.reasons == (
        'persistentvolumeclaim "data": spec.selector.matchExpressions[0].operator: Unsupported'
        " value: 'Near'",
    )


def test_bound_claim_pins_the_pod_to_its_volumes_nodes() -> None:
    plugin, _, handle = setup(bound_claim("data", "pv1"), pv("pv1", nodes=("n2",), phase="Bound"))
    _, reasons, ok = run_filter(plugin, handle, web("data"))
    assert ok == ["n2"]
    assert reasons == {"n1": REASON_NODE_CONFLICT, "n3": REASON_NODE_CONFLICT}


def test_bound_claim_without_affinity_passes_everywhere_and_needs_no_binding() -> None:
    plugin, vols, handle = setup(bound_claim("data", "nfs"), pv("nfs", phase="Bound"))
    state, reasons, ok = run_filter(plugin, handle, web("data"))
    assert ok == ["n1", "n2", "n3"] and not reasons
    assert plugin.reserve(state, web("data"), "n1").is_success()
    assert asyncio.run(plugin.pre_bind(state, web("data"), "n1")).is_success()
    assert vols.writes == []


def test_bound_claim_to_a_missing_volume() -> None:
    plugin, _, handle = setup(bound_claim("data", "gone"))
    _, reasons, ok = run_filter(plugin, handle, web("data"))
    assert ok == [] and set(reasons.values()) == {REASON_PV_NOT_EXIST}


def test_wait_for_first_consumer_finds_the_node_with_a_free_volume() -> None:
    plugin, _, handle = setup(
        claim("data", size=5 * GiB),
        storage_class(),
        pv("small", size=GiB, nodes=("n1",)),  # too small
        pv("fits", size=10 * GiB, nodes=("n2",)),
        pv("other-class", "fast", size=10 * GiB, nodes=("n3",)),
    )
    _, reasons, ok = run_filter(plugin, handle, web("data"))
    assert ok == ["n2"]
    assert reasons == {"n1": REASON_BIND_CONFLICT, "n3": REASON_BIND_CONFLICT}


def test_two_claims_of_one_pod_take_two_volumes() -> None:
    plugin, _, handle = setup(
        claim("a"),
        claim("b"),
        storage_class(),
        pv("only", nodes=("n1",)),
        pv("x", nodes=("n2",)),
        pv("y", nodes=("n2",)),
    )
    _, _, ok = run_filter(plugin, handle, web("a", "b"))
    assert ok == ["n2"]


def test_reserve_assumes_so_the_next_pod_does_not_take_the_same_volume() -> None:
    plugin, _, handle = setup(claim("a"), claim("b"), storage_class(), pv("pv1", nodes=("n1",)))
    first = pod("first", volumes=(pvc_volume("a"),))
    state, _, ok = run_filter(plugin, handle, first)
    assert ok == ["n1"]
    assert plugin.reserve(state, first, "n1").is_success()
    second = pod("second", volumes=(pvc_volume("b"),))
    _, reasons, ok2 = run_filter(plugin, handle, second)
    assert ok2 == [] and reasons["n1"] == REASON_BIND_CONFLICT
    plugin.unreserve(state, first, "n1")  # the first pod failed later: the volume is free
    _, _, ok3 = run_filter(plugin, handle, second)
    assert ok3 == ["n1"]


def test_dynamic_provisioning_on_every_node_its_class_allows() -> None:
    zoned = storage_class(
        "dyn",
        "csi.example.com",
        allowed_topologies=(TopologyTerm((("kubernetes.io/hostname", frozenset({"n1", "n3"})),)),),
    )
    plugin, _, handle = setup(claim("data", "dyn"), zoned)
    _, reasons, ok = run_filter(plugin, handle, web("data"))
    assert ok == ["n1", "n3"] and reasons == {"n2": REASON_BIND_CONFLICT}


def test_a_claim_already_selected_for_a_node_fits_only_there() -> None:
    annotated = claim("data", "dyn", annotations={"volume.kubernetes.io/selected-node": "n3"})
    plugin, _, handle = setup(annotated, storage_class("dyn", "csi.example.com"))
    _, _, ok = run_filter(plugin, handle, web("data"))
    assert ok == ["n3"]


def test_no_provisioner_and_no_volume_is_a_bind_conflict_everywhere() -> None:
    plugin, _, handle = setup(claim("data"), storage_class())
    _, reasons, ok = run_filter(plugin, handle, web("data"))
    assert ok == [] and set(reasons.values()) == {REASON_BIND_CONFLICT}


def test_a_node_failing_several_ways_counts_under_each_reason() -> None:
    plugin, _, handle = setup(
        bound_claim("b", "pv-b"),
        pv("pv-b", nodes=("n1",), phase="Bound"),
        claim("u"),
        storage_class(),
        pv("free", nodes=("n2",)),
    )
    _, reasons, ok = run_filter(plugin, handle, web("b", "u"))
    assert ok == []
    assert reasons == {
        "n1": REASON_BIND_CONFLICT,
        "n2": REASON_NODE_CONFLICT,
        "n3": f"{REASON_NODE_CONFLICT}, {REASON_BIND_CONFLICT}",
    }


# -- Reserve / PreBind -------------------------------------------------------------------


async def _controller_binds(vols: FakeVolumes, claim_name: str, pv_name: str) -> None:
    """The PV controller: once the volume's claimRef is set, bind the claim to it."""
    while True:
        v = vols.volume(pv_name)
        if v is not None and v.claim_ref is not None:
            break
        await vols.changed(5)
    c = vols.claims[("ns", claim_name)]
    vols.add(
        replace(
            c,
            volume_name=pv_name,
            resource_version="9",
            annotations={"pv.kubernetes.io/bind-completed": "yes"},
        )
    )


def test_pre_bind_sets_the_claim_ref_and_waits_for_the_controller() -> None:
    plugin, vols, handle = setup(claim("data"), storage_class(), pv("pv1", nodes=("n2",)))
    p = web("data")
    state, _, _ = run_filter(plugin, handle, p)
    assert plugin.reserve(state, p, "n2").is_success()

    async def scenario() -> Status:
        controller = asyncio.create_task(_controller_binds(vols, "data", "pv1"))
        st = await plugin.pre_bind(state, p, "n2")
        await controller
        return st

    st = asyncio.run(scenario())
    assert st.is_success(), st
    assert vols.writes == ["pv pv1 -> ns/data"]
    written = vols.pvs["pv1"]
    assert written.claim_ref == ClaimRef("ns", "data", "uid-data")
    assert written.annotations["pv.kubernetes.io/bound-by-controller"] == "yes"


def test_pre_bind_annotates_a_claim_to_provision() -> None:
    plugin, vols, handle = setup(claim("data", "dyn"), storage_class("dyn", "csi.example.com"))
    p = web("data")
    state, _, _ = run_filter(plugin, handle, p)
    assert plugin.reserve(state, p, "n1").is_success()

    async def scenario() -> Status:
        async def provisioner() -> None:
            while (
                "volume.kubernetes.io/selected-node" not in vols.claims[("ns", "data")].annotations
            ):
                await vols.changed(5)
            vols.add(pv("pvc-1", "dyn", nodes=("n1",), phase="Bound"))
            c = vols.claims[("ns", "data")]
            vols.add(
                replace(
                    c,
                    volume_name="pvc-1",
                    resource_version="9",
                    annotations={**c.annotations, "pv.kubernetes.io/bind-completed": "yes"},
                )
            )

        task = asyncio.create_task(provisioner())
        st = await plugin.pre_bind(state, p, "n1")
        await task
        return st

    assert asyncio.run(scenario()).is_success()
    assert vols.writes == ["pvc ns/data selected-node n1"]


def test_pre_bind_times_out_and_unreserve_frees_the_volume() -> None:
    plugin, _vols, handle = setup(
        claim("data"), storage_class(), pv("pv1", nodes=("n1",)), timeout=0
    )
    p = web("data")
    state, _, _ = run_filter(plugin, handle, p)
    assert plugin.reserve(state, p, "n1").is_success()
    st = asyncio.run(plugin.pre_bind(state, p, "n1"))
    assert st.code is Code.ERROR
    assert st.reasons == ("binding volumes: context deadline exceeded",)
    plugin.unreserve(state, p, "n1")
    assert len(plugin.cache) == 0


def test_pre_bind_fails_when_the_claim_ref_is_reset_or_a_write_is_refused() -> None:
    plugin, vols, handle = setup(claim("data"), storage_class(), pv("pv1", nodes=("n1",)))
    p = web("data")
    state, _, _ = run_filter(plugin, handle, p)
    assert plugin.reserve(state, p, "n1").is_success()

    async def reset() -> Status:
        async def controller() -> None:
            while vols.volume("pv1").claim_ref is None:  # type: ignore[union-attr]
                await vols.changed(5)
            vols.add(replace(vols.pvs["pv1"], claim_ref=None, resource_version="10"))

        task = asyncio.create_task(controller())
        st = await plugin.pre_bind(state, p, "n1")
        await task
        return st

    st = asyncio.run(reset())
    assert st.reasons == ('binding volumes: ClaimRef got reset for pv "pv1"',)

    plugin2, vols2, handle2 = setup(claim("data"), storage_class(), pv("pv1", nodes=("n1",)))
    vols2.refuse = 'Operation cannot be fulfilled on persistentvolumes "pv1": conflict'
    state2, _, _ = run_filter(plugin2, handle2, p)
    assert plugin2.reserve(state2, p, "n1").is_success()
    st2 = asyncio.run(plugin2.pre_bind(state2, p, "n1"))
    assert st2.code is Code.ERROR and st2.reasons == (vols2.refuse,)


def test_the_assumption_gives_way_to_a_newer_watched_version() -> None:
    plugin, vols, handle = setup(claim("a"), claim("b"), storage_class(), pv("pv1", nodes=("n1",)))
    first = pod("first", volumes=(pvc_volume("a"),))
    state, _, _ = run_filter(plugin, handle, first)
    plugin.reserve(state, first, "n1")
    assert plugin.cache.volume("pv1").claim_ref is not None  # type: ignore[union-attr]
    # Someone else (the admin) frees the volume: a newer version wins over the assumption.
    vols.add(replace(vols.pvs["pv1"], resource_version="5"))
    assert plugin.cache.volume("pv1").claim_ref is None  # type: ignore[union-attr]
    assert len(plugin.cache) == 0


def test_bad_args_are_refused() -> None:
    assert VolumeBindingArgs(-1).validate()[0][0] == "bindTimeoutSeconds"
    with pytest.raises(ValueError, match="bindTimeoutSeconds"):
        setup(timeout=-1)


def test_ephemeral_claim_name_is_pod_dash_volume() -> None:
    p = pod("web", volumes=(PodVolume("scratch", "web-scratch", ephemeral=True),))
    plugin, _, _ = setup(
        claim("web-scratch", "dyn", controller_uid="uid-web"),
        storage_class("dyn", "csi.example.com"),
    )
    assert plugin.pre_filter(CycleState(), p)[1].is_success()


def _brute_force(st: Any, snap: Any, row: int) -> list[str] | None:
    """findMatchingVolumes node by node with the reference FindMatchingVolume."""
    node = snap.node_at(row)
    chosen: list[str] = []
    for d in st.delayed:
        got = find_matching_volume(d.cands, node.labels, node.name, chosen)
        if got is None:
            return None
        chosen.append(got.name)
    return chosen


@pytest.mark.parametrize("seed", range(25))
def test_the_node_index_chooses_exactly_what_find_matching_volume_does(seed: int) -> None:
    rng = random.Random(seed)
    nodes = [f"n{i}" for i in range(12)]
    zone = {n: rng.choice("abc") for n in nodes}
    objs: list[object] = [storage_class()]
    for i in range(rng.randint(0, 14)):
        kind = rng.random()
        if kind < 0.4:
            term = (
                NodeSelectorTerm(
                    (Requirement(HOSTNAME, "In", frozenset(rng.sample(nodes, rng.randint(1, 3)))),)
                ),
            )
        elif kind < 0.6:
            term = (
                NodeSelectorTerm((Requirement("zone", "In", frozenset(rng.sample("abc", 1))),)),
            )
        elif kind < 0.75:
            term = (
                NodeSelectorTerm((Requirement("zone", "NotIn", frozenset("a")),)),
                NodeSelectorTerm(
                    fields=(Requirement("metadata.name", "In", frozenset({rng.choice(nodes)})),)
                ),
            )
        else:
            term = None
        objs.append(replace(pv(f"v{i:02d}", size=rng.choice((1, 2, 4)) * GiB), node_affinity=term))
    claims = [claim(f"c{j}", size=rng.choice((1, 2, 3)) * GiB) for j in range(rng.randint(1, 3))]
    vols = FakeVolumes()
    vols.add(*claims, *objs)  # type: ignore[arg-type]
    snap = snapshot(*(node(n, labels={HOSTNAME: n, "zone": zone[n]}) for n in nodes))
    handle = FakeHandle(snap, volumes=vols)
    plugin = VolumeBinding(None, handle)
    p = pod("p", volumes=tuple(pvc_volume(c.name, f"v{j}") for j, c in enumerate(claims)))
    state = CycleState()
    assert plugin.pre_filter(state, p)[1].is_success()
    res = plugin.filter(state, p, all_rows(snap))
    st = state.read(_STATE)
    for row in np.flatnonzero(all_rows(snap)):
        want = _brute_force(st, snap, int(row))
        assert bool(res.feasible[row]) is (want is not None), (seed, row)
        if want:
            assert [v.name for v, _ in st.by_row[int(row)].static] == want, (seed, row)

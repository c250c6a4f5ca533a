"""FindMatchingVolume's rules (component-helpers pv_helpers_test.go's cases, on the
scheduler path) and the claim lookups' kube wording."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpusched.framework.volumes import NO_VOLUMES
from gpusched.model.selector import LabelSelector, Requirement
from gpusched.model.volume import (
    Claim,
    ClaimRef,
    PersistentVolume,
    PodVolume,
)
from gpusched.plugins.helper.volumes import candidates, find_matching_volume, pod_claims
from tests.builders import GiB, claim, pod, pv, pvc_volume
from tests.fakes import FakeVolumes

NODE = {"kubernetes.io/hostname": "n1"}


def match(c: Claim, pvs: list[PersistentVolume], excluded: tuple[str, ...] = ()) -> str | None:
    got = find_matching_volume(candidates(c, pvs), NODE, "n1", excluded)
    return got.name if got is not None else None


def test_the_smallest_volume_that_fits_wins() -> None:
    pvs = [pv("big", size=10 * GiB), pv("small", size=1 * GiB), pv("mid", size=5 * GiB)]
    assert match(claim("c", size=2 * GiB), pvs) == "mid"
    assert match(claim("c", size=GiB), pvs) == "small"  # capacity == request fits
    assert match(claim("c", size=11 * GiB), pvs) is None


@pytest.mark.parametrize(
    ("why", "volume"),
    [
        ("another class", pv("v", "other")),
        ("missing access mode", pv("v", modes=("ReadOnlyMany",))),
        ("block volume for a filesystem claim", pv("v", volume_mode="Block")),
        ("being deleted", pv("v", deleting=True)),
        ("not Available", pv("v", phase="Released")),
        ("bound to another claim", pv("v", claim_ref=ClaimRef("ns", "other"))),
        ("not on this node", pv("v", nodes=("n2",))),
        ("labels outside the selector", pv("v", labels={"tier": "slow"})),
    ],
)
def test_a_volume_is_skipped_when(why: str, volume: PersistentVolume) -> None:
    c = claim(
        "c",
        modes=("ReadWriteOnce",),
        selector=LabelSelector((Requirement("tier", "In", frozenset({"fast"})),))
        if why == "labels outside the selector"
        else None,
    )
    assert match(c, [volume]) is None, why
    ok = pv("v", labels={"tier": "fast"})
    assert match(c, [ok]) == "v"


def test_access_modes_must_all_be_offered() -> None:
    rwx = pv("v", modes=("ReadWriteOnce", "ReadWriteMany"))
    assert match(claim("c", modes=("ReadWriteMany",)), [rwx]) == "v"
    assert match(claim("c", modes=("ReadWriteMany", "ReadOnlyMany")), [rwx]) is None


def test_a_prebound_volume_wins_over_a_smaller_free_one_and_only_on_its_node() -> None:
    c = claim("c")
    pre = pv("pre", size=50 * GiB, claim_ref=ClaimRef("ns", "c"), phase="Bound")
    assert match(c, [pv("small"), pre]) == "pre"
    elsewhere = replace(pre, node_affinity=pv("x", nodes=("n2",)).node_affinity)
    assert match(c, [pv("small"), elsewhere]) is None  # kube: no match at all
    wrong_uid = replace(pre, claim_ref=ClaimRef("ns", "c", "another-uid"))
    assert match(c, [pv("small"), wrong_uid]) == "small"


def test_volumes_taken_by_the_pods_other_claims_are_excluded() -> None:
    pvs = [pv("a"), pv("b", size=2 * GiB)]
    assert match(claim("c"), pvs, excluded=("a",)) == "b"
    assert match(claim("c"), pvs, excluded=("a", "b")) is None


def test_equal_sizes_pick_by_name_deterministically() -> None:
    assert match(claim("c"), [pv("z"), pv("a"), pv("m")]) == "a"


def test_pod_claims_reports_kube_messages() -> None:
    vols = FakeVolumes()
    p = pod("web", volumes=(pvc_volume("data"),))
    assert pod_claims(vols.claim, p)[1] == 'persistentvolumeclaim "data" not found'
    vols.add(claim("data", deleting=True))
    assert pod_claims(vols.claim, p)[1] == 'persistentvolumeclaim "data" is being deleted'
    vols.add(claim("data", phase="Lost", volume_name="gone"))
    assert pod_claims(vols.claim, p)[1] == (
        'persistentvolumeclaim "data" bound to non-existent persistentvolume "gone"'
    )
    vols.add(claim("data"))
    got, why = pod_claims(vols.claim, p)
    assert why is None and [c.name for _, c in got] == ["data"]


def test_pod_claims_of_generic_ephemeral_volumes() -> None:
    p = pod("web", volumes=(PodVolume("scratch", "web-scratch", ephemeral=True),))
    vols = FakeVolumes()
    assert pod_claims(vols.claim, p)[1] == (
        'waiting for ephemeral volume controller to create the persistentvolumeclaim "web-scratch"'
    )
    vols.add(claim("web-scratch", controller_uid="someone-else"))
    assert pod_claims(vols.claim, p)[1] == (
        "PVC ns/web-scratch was not created for pod ns/web (pod is not owner)"
    )
    vols.add(claim("web-scratch", controller_uid=p.uid))
    assert pod_claims(vols.claim, p)[1] is None
    assert pod_claims(NO_VOLUMES.claim, p)[1] is not None

"""manifests/examples/dra/: every object parses with gpusched's parsers without errors, and
each workload example is placed by the simulator as its comment says, against the slices
NVIDIA's DRA driver publishes (gpusched/devcluster/dra_fixtures.py) and the classes its
chart installs (deviceclasses.yaml). tests/integration/test_examples.py globs only the top
level of manifests/examples/, so these are checked here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from gpusched.config import builtin_profile
from gpusched.core.schedule_one import Result
from gpusched.devcluster.dra_fixtures import DraNode, shared_gpu_slices, standard_slices
from gpusched.dra.cards import card_demand
from gpusched.framework.dra import MemoryDra
from gpusched.model.dra import (
    ResourceClaim,
    device_class_from_k8s,
    resource_claim_from_k8s,
    resource_slice_from_k8s,
)
from gpusched.model.node import NodeModel
from gpusched.model.pod import pod_from_k8s
from gpusched.plugins import default_registry
from gpusched.sim.engine import Simulation

EXAMPLES = Path(__file__).parents[2] / "manifests" / "examples" / "dra"
WORKLOADS = ("Job", "Deployment", "StatefulSet", "CronJob")
JSON = dict[str, Any]


def docs(name: str) -> list[JSON]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


def template_claim(template: JSON, name: str = "c", owner: str = "") -> ResourceClaim:
    """The ResourceClaim kube-controller-manager makes from a ResourceClaimTemplate."""
    meta: JSON = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1"}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner, "controller": True}
        ]
    return resource_claim_from_k8s({"metadata": meta, "spec": template["spec"]["spec"]})


def test_every_dra_example_parses_cleanly() -> None:
    files = sorted(EXAMPLES.glob("*.yaml"))
    assert {
        "one-gpu-job.yaml",
        "two-gpus-same-pcie-root.yaml",
        "shared-gpu-by-memory.yaml",
    } <= {p.name for p in files}
    kinds: set[str] = set()
    for path in files:
        for doc in docs(path.name):
            kind = doc["kind"]
            kinds.add(kind)
            if kind == "DeviceClass":
                assert not device_class_from_k8s(doc).errors, path
            elif kind == "ResourceClaimTemplate":
                assert not template_claim(doc).errors, (path, doc["metadata"]["name"])
            elif kind in WORKLOADS:
                spec = doc["spec"]["template"]["spec"]
                assert spec["schedulerName"] == "ai-scheduler", path
                pod = pod_from_k8s({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec})
                assert not pod.errors, (path, pod.errors)
                entries = {c.name for c in pod.pod_claims}
                assert entries and all(c.template for c in pod.pod_claims), path
                for container in spec["containers"]:
                    used = {c["name"] for c in container["resources"].get("claims", [])}
                    assert used and used <= entries, path
                    # The claim is the GPU: a pod asking both ways is refused.
                    assert "nvidia.com/gpu" not in container["resources"].get("limits", {})
            else:
                raise AssertionError(f"{path}: unexpected kind {kind}")
    assert {"DeviceClass", "ResourceClaimTemplate", "Job", "Deployment"} <= kinds


def world(slices: Callable[[DraNode], list[JSON]]) -> tuple[Simulation, MemoryDra]:
    dra = MemoryDra()
    for doc in docs("deviceclasses.yaml"):
        dra.put_class(device_class_from_k8s(doc))
    for i, raw in enumerate(slices(DraNode("n1", 8))):
        raw["metadata"]["uid"] = f"uid-slice-{i}"
        raw["metadata"]["name"] = f"n1-gpu.nvidia.com-{i}"
        dra.put_slice(resource_slice_from_k8s(raw))
    reg = default_registry()
    node = NodeModel(
        name="n1",
        cpu_milli=128_000,
        memory_bytes=2**40,
        pods=110,
        labels={"kubernetes.io/hostname": "n1"},
    )
    return Simulation([node], builtin_profile("ai-scheduler", reg), reg, dra=dra), dra


def run(name: str, slices: Callable[[DraNode], list[JSON]]) -> tuple[MemoryDra, list[Any]]:
    """Apply the example as the controllers would: each pod of the workload gets its claim
    from the template (named in its status), then is submitted. The allocated claims."""
    sim, dra = world(slices)
    [template] = [d for d in docs(name) if d["kind"] == "ResourceClaimTemplate"]
    [workload] = [d for d in docs(name) if d["kind"] in WORKLOADS]
    replicas = workload["spec"].get("replicas", workload["spec"].get("parallelism", 1))
    spec = workload["spec"]["template"]["spec"]
    [entry] = spec["resourceClaims"]
    assert entry["resourceClaimTemplateName"] == template["metadata"]["name"]
    out = []
    for i in range(replicas):
        pod_name, uid = f"p{i}", f"uid-p{i}"
        claim_name = f"{pod_name}-{entry['name']}-x7k2p"
        dra.put_claim(template_claim(template, claim_name, owner=uid))
        pod = pod_from_k8s(
            {
                "metadata": {"name": pod_name, "namespace": "ns", "uid": uid},
                "spec": spec,
                "status": {
                    "resourceClaimStatuses": [
                        {"name": entry["name"], "resourceClaimName": claim_name}
                    ]
                },
            }
        )
        decision = sim.submit(pod)
        assert decision.result is Result.SCHEDULED, (name, decision.message)
        assert decision.pod.gpu_from_claims  # placed by the card plugins
        got = dra.claim("ns", claim_name)
        assert got is not None and got.allocation is not None
        assert [r.name for r in got.reserved_for] == [pod_name]
        out.append(got)
    return dra, out


def attribute(dra: MemoryDra, device: str, name: str) -> object:
    for rs in dra.slices():
        for d in rs.devices:
            if d.name == device:
                return d.attributes[name].value
    raise AssertionError(f"no device {device}")


def test_one_gpu_job_gets_one_whole_gpu() -> None:
    _, [claim] = run("one-gpu-job.yaml", standard_slices)
    assert card_demand([dataclasses.replace(claim, allocation=None)], {"gpu.nvidia.com"}).cards == 1
    assert len(claim.allocation.results) == 1  # type: ignore[union-attr]


def test_the_pair_is_two_gpus_behind_one_pcie_root() -> None:
    dra, [claim] = run("two-gpus-same-pcie-root.yaml", standard_slices)
    assert claim.allocation is not None
    got = [r.device for r in claim.allocation.results]
    assert len(got) == 2
    roots = {attribute(dra, d, "resource.kubernetes.io/pcieRoot") for d in got}
    assert len(roots) == 1, got


def test_the_shares_land_on_one_gpu() -> None:
    _, claims = run("shared-gpu-by-memory.yaml", shared_gpu_slices)
    assert len(claims) == 2
    devices = {c.allocation.results[0].device for c in claims}
    assert len(devices) == 1, devices  # packed onto one card, not spread
    for c in claims:
        (r,) = c.allocation.results
        assert r.consumed_capacity == {"gpu.nvidia.com/memory": 20 * 1024**3}
        assert r.share_id

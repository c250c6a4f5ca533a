"""The NVIDIA-shaped slice builders: names, attribute types, grouping and counters as the
driver publishes them (the integration test test_dra_peer.py shows kube-scheduler accepts
them)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from gpusched.devcluster.dra_fixtures import (
    DRIVER,
    PCIE_ROOT,
    DraNode,
    binary_quantity,
    counter_name,
    device_classes,
    partitionable_slices,
    shared_gpu_slices,
    slices_for,
    standard_slices,
)


def test_quantities_serialise_as_binary_si() -> None:
    assert binary_quantity(81920 * 2**20) == "80Gi"
    assert binary_quantity(81559 * 2**20) == "81559Mi"
    assert binary_quantity(1536) == "1536"
    assert binary_quantity(0) == "0"
    with pytest.raises(ValueError, match="negative"):
        binary_quantity(-1)


def test_counter_names_are_the_dns_form_of_capacities() -> None:
    assert counter_name("copyEngines") == "copy-engines"
    assert counter_name("multiprocessors") == "multiprocessors"
    assert counter_name("HTTPServer") == "http-server"


def test_a_standard_pool_is_one_slice_of_gpu_devices_named_by_minor() -> None:
    [s] = standard_slices(DraNode("n1", 4, gpus_per_pcie_root=2))
    spec = s["spec"]
    assert spec["driver"] == DRIVER and spec["nodeName"] == "n1"
    assert spec["pool"] == {"name": "n1", "generation": 1, "resourceSliceCount": 1}
    assert s["metadata"]["generateName"] == "n1-gpu.nvidia.com-"
    names = [d["name"] for d in spec["devices"]]
    assert names == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    gpu0 = spec["devices"][0]
    assert gpu0["attributes"]["type"] == {"string": "gpu"}
    assert gpu0["attributes"]["cudaComputeCapability"] == {"version": "9.0.0"}
    assert gpu0["capacity"]["memory"] == {"value": "81559Mi"}
    roots = [d["attributes"][PCIE_ROOT]["string"] for d in spec["devices"]]
    assert roots[0] == roots[1] != roots[2] == roots[3]
    uuids = {d["attributes"]["uuid"]["string"] for d in spec["devices"]}
    assert len(uuids) == 4
    assert "partition2" not in gpu0["attributes"]


def test_fabric_partitions_group_gpus_by_nvlink_partition_size() -> None:
    [s] = standard_slices(DraNode("n1", 8, fabric_partitions=True))
    for size in (1, 2, 4, 8):
        groups = Counter(d["attributes"][f"partition{size}"]["int"] for d in s["spec"]["devices"])
        assert sorted(groups.values()) == [size] * (8 // size)


def test_the_shared_variant_marks_devices_for_multiple_allocations() -> None:
    [s] = shared_gpu_slices(DraNode("n1", 2), default_share="5Gi")
    for device in s["spec"]["devices"]:
        assert device["allowMultipleAllocations"] is True
        assert device["capacity"]["memory"]["requestPolicy"]["default"] == "5Gi"


def test_partitionable_pools_put_counters_first_and_partitions_fit_the_whole() -> None:
    slices = partitionable_slices(DraNode("n1", 2, product="A100-SXM4-80GB"))
    assert len(slices) == 3
    assert all(s["spec"]["pool"]["resourceSliceCount"] == 3 for s in slices)
    sets = {c["name"]: c["counters"] for c in slices[0]["spec"]["sharedCounters"]}
    assert set(sets) == {"gpu-0-counter-set", "gpu-1-counter-set"}
    assert "devices" not in slices[0]["spec"]
    devices = {d["name"]: d for d in slices[1]["spec"]["devices"]}
    assert "gpu-0" in devices and "gpu-0-mig-1g10gb-19-6" in devices
    whole = devices["gpu-0"]["consumesCounters"][0]["counters"]
    assert whole == sets["gpu-0-counter-set"]
    # Seven 1g.10gb placements use no more than the GPU has, of any counter.
    used: Counter[str] = Counter()
    for name, d in devices.items():
        if "-1g10gb-" in name:
            for counter, value in d["consumesCounters"][0]["counters"].items():
                used[counter] += int(value["value"].removesuffix("Mi")) * (
                    2**20 if value["value"].endswith("Mi") else 1
                )
    for counter, total in used.items():
        have = sets["gpu-0-counter-set"][counter]["value"]
        limit = int(have.removesuffix("Mi")) * (2**20 if have.endswith("Mi") else 1)
        assert total <= limit, counter


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown GPU product 'B999'"):
        standard_slices(DraNode("n1", 1, product="B999"))
    with pytest.raises(ValueError, match="not MIG capable"):
        partitionable_slices(DraNode("n1", 1, product="T4"))
    with pytest.raises(ValueError, match="unknown slice layout"):
        slices_for(DraNode("n1", 1), "weird")


def test_device_classes_select_by_type_and_map_the_extended_resource() -> None:
    gpu, mig = device_classes()
    assert gpu["metadata"]["name"] == "gpu.nvidia.com"
    assert gpu["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert gpu["spec"]["selectors"][0]["cel"]["expression"] == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    )
    assert mig["spec"]["selectors"][0]["cel"]["expression"].endswith("type == 'mig'")


EXAMPLES = Path(__file__).parents[3] / "manifests" / "examples" / "dra"


def test_the_example_classes_are_the_fixture_classes_and_templates_name_them() -> None:
    classes = [d for d in yaml.safe_load_all((EXAMPLES / "deviceclasses.yaml").read_text()) if d]
    assert classes == device_classes()
    names = {c["metadata"]["name"] for c in classes}
    templates = yaml.safe_load_all((EXAMPLES / "gpu-claim-templates.yaml").read_text())
    used = set()
    for template in filter(None, templates):
        for request in template["spec"]["spec"]["devices"]["requests"]:
            for ask in [request.get("exactly"), *request.get("firstAvailable", [])]:
                if ask:
                    used.add(ask["deviceClassName"])
    assert used == names

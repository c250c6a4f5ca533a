"""resource.k8s.io/v1 objects shaped like NVIDIA's DRA driver (k8s-dra-driver-gpu) publishes
them: driver gpu.nvidia.com, one pool per node named like the node, devices gpu-0..gpu-N
with the driver's attributes (type, uuid, index, minor, productName, brand, architecture,
cudaComputeCapability, driverVersion, cudaDriverVersion, pcieBusID and the standard
resource.kubernetes.io/pcieRoot) and capacity memory; the DeviceClass gpu.nvidia.com as its
Helm chart ships it; claims as users write them."""

from __future__ import annotations

from typing import Any

DRIVER = "gpu.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
JSON = dict[str, Any]


def gpu_device(index: int, *, product: str = "NVIDIA A100-SXM4-80GB", memory: str = "80Gi") -> JSON:
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-4c2a9d3e-51f1-7c0b-8e2d-0000000000{index:02d}"},
            "index": {"int": index},
            "minor": {"int": index},
            "productName": {"string": product},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Ampere"},
            "cudaComputeCapability": {"version": "8.0.0"},
            "driverVersion": {"version": "570.133.20"},
            "cudaDriverVersion": {"version": "12.8.0"},
            "pcieBusID": {"string": f"0000:{0x07 + index:02x}:00.0"},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{index // 4:02x}"},
        },
        "capacity": {"memory": {"value": memory}},
    }


def gpu_slice(
    node: str, gpus: int = 8, *, uid: str = "", rv: str = "1", generation: int = 1, **kw: Any
) -> JSON:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{node}-{DRIVER}-x7k2p",
            "uid": uid or f"uid-slice-{node}",
            "resourceVersion": rv,
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [gpu_device(i, **kw) for i in range(gpus)],
        },
    }


def gpu_class(rv: str = "1") -> JSON:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": GPU_CLASS, "uid": "uid-class-gpu", "resourceVersion": rv},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": "device.driver == 'gpu.nvidia.com' &&"
                        " device.attributes['gpu.nvidia.com'].type == 'gpu'"
                    }
                }
            ]
        },
    }


def gpu_claim(
    name: str,
    *,
    namespace: str = "ns",
    count: int = 1,
    uid: str = "",
    rv: str = "1",
    allocation: JSON | None = None,
    reserved_for: list[JSON] | None = None,
) -> JSON:
    claim: JSON = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-claim-{name}",
            "resourceVersion": rv,
        },
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS, "count": count}}
                ]
            }
        },
    }
    status: JSON = {}
    if allocation is not None:
        status["allocation"] = allocation
    if reserved_for is not None:
        status["reservedFor"] = reserved_for
    if status:
        claim["status"] = status
    return claim


def gpu_allocation(node: str, *indices: int, request: str = "gpu") -> JSON:
    return {
        "devices": {
            "results": [
                {"request": request, "driver": DRIVER, "pool": node, "device": f"gpu-{i}"}
                for i in indices
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }

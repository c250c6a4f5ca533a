"""ResourceSlices and DeviceClasses shaped as NVIDIA's DRA driver for GPUs publishes them,
for KWOK nodes of the local control plane (which run no kubelet plugin).

What the driver publishes, read from its sources (repository NVIDIA/k8s-dra-driver-gpu,
whose Go module is now sigs.k8s.io/dra-driver-nvidia-gpu; paths below):

* ``cmd/gpu-kubelet-plugin/deviceinfo.go`` (several stored versions, the newest on
  resource.k8s.io/v1): driver ``gpu.nvidia.com``; a full GPU is named ``gpu-<minor>``
  (older versions used the NVML index, and published ``index``/``minor`` int attributes that
  the current one no longer does). Attributes, unqualified (so in the driver's domain):
  ``type`` = "gpu", ``uuid``, ``productName``, ``brand``, ``architecture`` (strings),
  ``cudaComputeCapability``, ``driverVersion``, ``cudaDriverVersion`` (semver versions,
  ``semver.MustParse(x).String()``, so "9.0" is published as "9.0.0" and "580.95.05" as
  "580.95.5"), optionally ``addressingMode``; plus the standard Kubernetes attributes of
  ``k8s.io/dynamic-resource-allocation/deviceattribute``: ``resource.kubernetes.io/pciBusID``
  ("0000:07:00.0"), ``resource.kubernetes.io/pcieRoot`` ("pci0000:00", what a
  matchAttribute constraint on a PCIe root complex uses) and
  ``resource.kubernetes.io/numaNode`` (int). With its FabricManagerPartitioning gate the
  driver adds ``gpuModuleID`` and ``partition1``/``partition2``/``partition4``/
  ``partition8`` (ints: the Fabric Manager partition of that size holding the GPU, i.e.
  NVLink groups; its docs constrain 2-GPU claims with ``matchAttribute:
  gpu.nvidia.com/partition2``). Capacity: ``memory`` in bytes (BinarySI quantity).
* ``cmd/gpu-kubelet-plugin/mig.go`` and ``partitions.go``: MIG devices are
  ``gpu-<minor>-mig-<profile without dots>-<GI profile id>-<placement start>`` with
  ``type`` = "mig", ``parentUUID``, ``profile`` ("1g.10gb"), the parent's product/brand/
  architecture/versions, the parent's pciBusID and pcieRoot; capacities
  ``multiprocessors``, ``copyEngines``, ``decoders``, ``encoders``, ``jpegEngines``,
  ``ofaEngines``, ``memory``. With its DynamicMIG gate (KEP-4815, partitionable devices)
  every GPU gets one CounterSet ``gpu-<minor>-counter-set`` whose counters are the
  capacities' names in DNS form (``copy-engines``...) at the GPU's maximum plus one
  ``memory-slice-<i>`` counter of 1 per memory slice; the full GPU consumes all of it and a
  MIG placement its profile's capacities plus its memory slices.
* ``cmd/gpu-kubelet-plugin/driver.go``: one pool per node named after the node. Without
  DynamicMIG: one slice holding every device. With it, on Kubernetes >= 1.35
  (``generateSplitResourceSlices``): G+1 slices for G GPUs, first one holding only the
  sharedCounters of all GPUs, then one per GPU with its full device and MIG placements.
  The slices are written by k8s.io/dynamic-resource-allocation's resourceslice controller
  (``resourceslice/resourceslicecontroller.go``, kubernetes/kubernetes): generateName
  ``<node>-gpu.nvidia.com-``, a controller ownerReference to the Node (so the garbage
  collector deletes them with it), ``spec.nodeName`` = the node, ``spec.pool`` =
  {name: node, generation, resourceSliceCount}.
* DeviceClasses of the Helm chart (``deployments/helm/nvidia-dra-driver-gpu/templates/
  deviceclass-gpu.yaml``, read from the fork jgehrcke/k8s-dra-driver-gpu since the stored
  NVIDIA copy lacks the template; ``deviceclass-mig.yaml`` as quoted in the driver's docs):
  ``gpu.nvidia.com`` selects ``device.driver == 'gpu.nvidia.com' &&
  device.attributes['gpu.nvidia.com'].type == 'gpu'`` and, on resource.k8s.io/v1, maps the
  extended resource ``nvidia.com/gpu`` (DRAExtendedResource); ``mig.nvidia.com`` selects
  type 'mig'. (The chart's ComputeDomain classes belong to another driver,
  compute-domain.nvidia.com, and are left out.)

Not published by the driver: ``allowMultipleAllocations`` / consumable capacity (KEP-5075;
the driver shares a GPU through one claim used by several pods, with time-slicing or MPS
in an opaque config). :func:`shared_gpu_slices` is therefore a *variant*: this driver's GPU
device with ``allowMultipleAllocations`` and a ``memory`` request policy, for testing the
consumable-capacity path against this device shape; it says so in its name.

Feature gates (kube-apiserver v1.36.3 of this devcluster, its kubernetes_feature_enabled
metric): resource.k8s.io/v1 is the only served version; DynamicResourceAllocation,
DRAPrioritizedList and DRAAdminAccess are GA; DRAConsumableCapacity,
DRAPartitionableDevices, DRADeviceTaints, DRAExtendedResource,
DRAResourceClaimDeviceStatus, DRAResourceClaimGranularStatusAuthorization,
DRADeviceBindingConditions and DRASchedulerFilterTimeout are beta and on; DRADeviceTaintRules
(beta) and the alpha ones are off. So the devcluster needs no extra gate for any of this.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpusched.kube import JSON, ApiError, Kube, create_or_replace

DRIVER = "gpu.nvidia.com"
API_VERSION = "resource.k8s.io/v1"
RESOURCE_API = f"/apis/{API_VERSION}"
SLICES = f"{RESOURCE_API}/resourceslices"
DEVICE_CLASSES = f"{RESOURCE_API}/deviceclasses"
STANDARD_PREFIX = "resource.kubernetes.io/"
PCIE_ROOT = STANDARD_PREFIX + "pcieRoot"
PCI_BUS_ID = STANDARD_PREFIX + "pciBusID"
NUMA_NODE = STANDARD_PREFIX + "numaNode"
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
EXTENDED_RESOURCE = "nvidia.com/gpu"

# The driver's NVML-derived versions as it publishes them (semver String()).
DRIVER_VERSION = "580.95.5"
CUDA_DRIVER_VERSION = "13.0.0"

_BINARY_SUFFIXES: tuple[tuple[str, int], ...] = tuple(
    (suffix, 2 ** (10 * power)) for power, suffix in reversed(list(enumerate("KMGTPE", 1)))
)
MIB = 2**20


def binary_quantity(value: int) -> str:
    """An integer as resource.NewQuantity(value, BinarySI) serialises it: the largest binary
    suffix that divides it exactly, else the plain number."""
    if value < 0:
        raise ValueError(f"negative quantity {value}")
    for suffix, unit in _BINARY_SUFFIXES:
        if value and value % unit == 0:
            return f"{value // unit}{suffix}i"
    return str(value)


# -- products -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A GPU instance profile as NVML reports it (nvidia-smi mig -lgip)."""

    name: str  # "1g.10gb"
    gi_profile_id: int
    slices: int  # memory slices one placement spans
    placements: tuple[int, ...]  # placement starts
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    memory_mib: int

    def capacities(self) -> dict[str, int]:
        return {
            "multiprocessors": self.multiprocessors,
            "copyEngines": self.copy_engines,
            "decoders": self.decoders,
            "encoders": self.encoders,
            "jpegEngines": self.jpeg_engines,
            "ofaEngines": self.ofa_engines,
            "memory": self.memory_mib * MIB,
        }


@dataclass(frozen=True, slots=True)
class GpuProduct:
    product_name: str  # NVML's name, as the productName attribute carries it
    brand: str
    architecture: str
    cuda_compute_capability: str  # published as a semver version
    memory_bytes: int
    memory_slices: int = 0  # MIG memory slices; 0: not MIG capable
    mig_profiles: tuple[MigProfile, ...] = ()


# A100-SXM4-80GB's profiles (nvidia-smi mig -lgip): a subset keeps the slices small while
# still letting placements overlap (1g in 3g, 3g in 7g).
_A100_80GB_MIG = (
    MigProfile("1g.10gb", 19, 1, (0, 1, 2, 3, 4, 5, 6), 14, 1, 0, 0, 0, 0, 9728),
    MigProfile("3g.40gb", 9, 4, (0, 4), 42, 3, 2, 0, 0, 0, 40192),
    MigProfile("7g.80gb", 0, 8, (0,), 98, 7, 5, 0, 1, 1, 81152),
)

PRODUCTS: dict[str, GpuProduct] = {
    "A100-SXM4-80GB": GpuProduct(
        "NVIDIA A100-SXM4-80GB", "Nvidia", "Ampere", "8.0.0", 81920 * MIB, 8, _A100_80GB_MIG
    ),
    "H100-80GB-HBM3": GpuProduct("NVIDIA H100 80GB HBM3", "Nvidia", "Hopper", "9.0.0", 81559 * MIB),
    "L4": GpuProduct("NVIDIA L4", "Nvidia", "Ada Lovelace", "8.9.0", 23034 * MIB),
    "T4": GpuProduct("Tesla T4", "Nvidia", "Turing", "7.5.0", 15360 * MIB),
}


# -- one node's devices ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DraNode:
    """What the driver would discover on a node.

    ``gpus_per_pcie_root``: GPUs behind one PCIe root complex (2 on a DGX/HGX board, one
    PCIe switch per pair), so resource.kubernetes.io/pcieRoot groups them.
    ``fabric_partitions``: publish the Fabric Manager NVLink attributes (gpuModuleID,
    partitionN) of an 8-GPU HGX board's shared-NVSwitch partitions, as the driver does with
    FabricManagerPartitioning on.
    """

    name: str
    gpus: int
    product: str = "H100-80GB-HBM3"  # key of PRODUCTS
    gpus_per_pcie_root: int = 2
    fabric_partitions: bool = False
    uid: str = ""  # the Node's uid, for the ownerReference; filled in by the publisher

    def spec(self) -> GpuProduct:
        try:
            return PRODUCTS[self.product]
        except KeyError:
            raise ValueError(
                f"unknown GPU product {self.product!r}; known: {sorted(PRODUCTS)}"
            ) from None


def gpu_uuid(node: str, minor: int) -> str:
    """Stable per node and minor, so a re-published node keeps its cards' identities."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}/{minor}"))


def pci_bus_id(minor: int) -> str:
    return f"0000:{0x18 + 0x10 * minor:02x}:00.0"


def pcie_root(node: DraNode, minor: int) -> str:
    group = minor // max(node.gpus_per_pcie_root, 1)
    return f"pci0000:{0x10 * group:02x}"


def _string(value: str) -> JSON:
    return {"string": value}


def _int(value: int) -> JSON:
    return {"int": value}


def _version(value: str) -> JSON:
    return {"version": value}


# Fabric Manager's shared-NVSwitch partition ids on an 8-GPU HGX board: 0 is all eight,
# 1-2 the halves, 3-6 the pairs, 7-14 the single GPUs (NVIDIA Fabric Manager user guide).
def _fabric_attributes(minor: int) -> dict[str, JSON]:
    return {
        "gpuModuleID": _int(minor + 1),
        "partition8": _int(0),
        "partition4": _int(1 + minor // 4),
        "partition2": _int(3 + minor // 2),
        "partition1": _int(7 + minor),
    }


def gpu_attributes(node: DraNode, minor: int) -> dict[str, JSON]:
    product = node.spec()
    attributes: dict[str, JSON] = {
        "type": _string("gpu"),
        "uuid": _string(gpu_uuid(node.name, minor)),
        "productName": _string(product.product_name),
        "brand": _string(product.brand),
        "architecture": _string(product.architecture),
        "cudaComputeCapability": _version(product.cuda_compute_capability),
        "driverVersion": _version(DRIVER_VERSION),
        "cudaDriverVersion": _version(CUDA_DRIVER_VERSION),
        PCI_BUS_ID: _string(pci_bus_id(minor)),
        PCIE_ROOT: _string(pcie_root(node, minor)),
        NUMA_NODE: _int(0 if minor < max(node.gpus // 2, 1) else 1),
    }
    if node.fabric_partitions:
        attributes.update(_fabric_attributes(minor))
    return attributes


def gpu_device(node: DraNode, minor: int) -> JSON:
    """A full GPU as GpuInfo.GetDevice publishes it (no DynamicMIG)."""
    return {
        "name": f"gpu-{minor}",
        "attributes": gpu_attributes(node, minor),
        "capacity": {"memory": {"value": binary_quantity(node.spec().memory_bytes)}},
    }


def standard_slices(node: DraNode) -> list[JSON]:
    """The driver's default publication: one slice, every GPU in it."""
    if node.gpus < 0:
        raise ValueError(f"{node.name}: GPU count must be >= 0, got {node.gpus}")
    devices = [gpu_device(node, minor) for minor in range(node.gpus)]
    return [_slice(node, {"devices": devices}, generation=1, count=1)]


def shared_gpu_slices(node: DraNode, *, default_share: str = "10Gi") -> list[JSON]:
    """VARIANT, not published by the driver: its GPU devices made shareable by capacity
    (KEP-5075, DRAConsumableCapacity): allowMultipleAllocations and a request policy on
    ``memory`` (default ``default_share``, any amount in 1Mi steps up to the card)."""
    [slice_] = standard_slices(node)
    for device in slice_["spec"]["devices"]:
        device["allowMultipleAllocations"] = True
        memory = device["capacity"]["memory"]
        memory["requestPolicy"] = {
            "default": default_share,
            "validRange": {"min": "1Mi", "step": "1Mi"},
        }
    return [slice_]


# -- partitionable (DynamicMIG) --------------------------------------------------------------

_CAMEL_1 = re.compile(r"([a-z0-9])([A-Z])")
_CAMEL_2 = re.compile(r"([A-Z]+)([A-Z][a-z])")


def counter_name(capacity: str) -> str:
    """camelToDNSName of partitions.go: copyEngines -> copy-engines."""
    return _CAMEL_2.sub(r"\1-\2", _CAMEL_1.sub(r"\1-\2", capacity)).lower()


def _max_capacities(product: GpuProduct) -> dict[str, int]:
    out: dict[str, int] = {}
    for profile in product.mig_profiles:
        for name, value in profile.capacities().items():
            out[name] = max(out.get(name, 0), value)
    return out


def _counters(capacities: Mapping[str, int], start: int, size: int) -> dict[str, JSON]:
    counters = {counter_name(k): {"value": binary_quantity(v)} for k, v in capacities.items()}
    for i in range(start, start + size):
        counters[f"memory-slice-{i}"] = {"value": "1"}
    return counters


def counter_set_name(minor: int) -> str:
    return f"gpu-{minor}-counter-set"


def mig_device_name(minor: int, profile: MigProfile, start: int) -> str:
    return (
        f"gpu-{minor}-mig-{profile.name.replace('.', '').lower()}-{profile.gi_profile_id}-{start}"
    )


def _mig_device(node: DraNode, minor: int, profile: MigProfile, start: int) -> JSON:
    product = node.spec()
    attributes: dict[str, JSON] = {
        "type": _string("mig"),
        "parentUUID": _string(gpu_uuid(node.name, minor)),
        "profile": _string(profile.name),
        "productName": _string(product.product_name),
        "brand": _string(product.brand),
        "architecture": _string(product.architecture),
        "cudaComputeCapability": _version(product.cuda_compute_capability),
        "driverVersion": _version(DRIVER_VERSION),
        "cudaDriverVersion": _version(CUDA_DRIVER_VERSION),
        PCI_BUS_ID: _string(pci_bus_id(minor)),
        PCIE_ROOT: _string(pcie_root(node, minor)),
    }
    capacities = profile.capacities()
    return {
        "name": mig_device_name(minor, profile, start),
        "attributes": attributes,
        "capacity": {k: {"value": binary_quantity(v)} for k, v in capacities.items()},
        "consumesCounters": [
            {
                "counterSet": counter_set_name(minor),
                "counters": _counters(capacities, start, profile.slices),
            }
        ],
    }


def partitionable_slices(node: DraNode) -> list[JSON]:
    """The DynamicMIG publication on Kubernetes >= 1.35: a slice of every GPU's CounterSet,
    then one slice per GPU with the full GPU (consuming its whole set) and every MIG
    placement (consuming its share). Needs a MIG-capable product."""
    product = node.spec()
    if not product.mig_profiles:
        raise ValueError(f"{node.product} is not MIG capable; no partitionable slices")
    maximum = _max_capacities(product)
    count = node.gpus + 1
    counter_sets = [
        {"name": counter_set_name(m), "counters": _counters(maximum, 0, product.memory_slices)}
        for m in range(node.gpus)
    ]
    slices = [_slice(node, {"sharedCounters": counter_sets}, generation=1, count=count)]
    for minor in range(node.gpus):
        full = {
            "name": f"gpu-{minor}",
            "attributes": gpu_attributes(node, minor),
            "capacity": {k: {"value": binary_quantity(v)} for k, v in maximum.items()},
            "consumesCounters": [
                {
                    "counterSet": counter_set_name(minor),
                    "counters": _counters(maximum, 0, product.memory_slices),
                }
            ],
        }
        devices = [full]
        for profile in product.mig_profiles:
            devices += [_mig_device(node, minor, profile, s) for s in profile.placements]
        devices.sort(key=lambda d: str(d["name"]))  # the driver sorts by device name
        slices.append(_slice(node, {"devices": devices}, generation=1, count=count))
    return slices


def _slice(node: DraNode, content: JSON, *, generation: int, count: int) -> JSON:
    metadata: JSON = {"generateName": f"{node.name}-{DRIVER}-"}
    if node.uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": node.name,
                "uid": node.uid,
                "controller": True,
            }
        ]
    spec: JSON = {
        "driver": DRIVER,
        "pool": {"name": node.name, "generation": generation, "resourceSliceCount": count},
        "nodeName": node.name,
        **content,
    }
    return {"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": metadata, "spec": spec}


# -- DeviceClasses ----------------------------------------------------------------------------


def _selector(device_type: str) -> str:
    return f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{device_type}'"


def device_classes() -> list[JSON]:
    """The chart's classes as it renders them on resource.k8s.io/v1."""
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "DeviceClass",
            "metadata": {"name": GPU_CLASS},
            "spec": {
                "selectors": [{"cel": {"expression": _selector("gpu")}}],
                "extendedResourceName": EXTENDED_RESOURCE,
            },
        },
        {
            "apiVersion": API_VERSION,
            "kind": "DeviceClass",
            "metadata": {"name": MIG_CLASS},
            "spec": {"selectors": [{"cel": {"expression": _selector("mig")}}]},
        },
    ]


# -- publishing -------------------------------------------------------------------------------

Layout = str  # "standard" | "partitionable" | "shared"
LAYOUTS = {"standard": standard_slices, "partitionable": partitionable_slices}


def slices_for(node: DraNode, layout: Layout = "standard") -> list[JSON]:
    if layout == "shared":
        return shared_gpu_slices(node)
    try:
        build = LAYOUTS[layout]
    except KeyError:
        raise ValueError(
            f"unknown slice layout {layout!r}; known: {[*LAYOUTS, 'shared']}"
        ) from None
    return build(node)


def _node_query(node: str) -> list[tuple[str, str]]:
    return [("fieldSelector", f"spec.nodeName={node},spec.driver={DRIVER}")]


async def node_slices(kube: Kube, node: str) -> list[JSON]:
    listing = await kube.get(SLICES, query=_node_query(node))
    items: list[JSON] = listing.get("items", [])
    return items


@dataclass
class Publisher:
    """Plays the driver's kubelet plugin for KWOK nodes: publishes a node's pool (a new
    generation on every change, the old slices deleted after the new ones exist, as the
    resourceslice controller does), withdraws it, and installs the DeviceClasses."""

    kube: Kube
    layout: Layout = "standard"

    async def install_classes(self) -> list[str]:
        names = []
        for cls in device_classes():
            await create_or_replace(self.kube, DEVICE_CLASSES, cls)
            names.append(cls["metadata"]["name"])
        return names

    async def publish(self, node: DraNode, layout: Layout | None = None) -> list[JSON]:
        """Create the node's pool (owned by the Node, read for its uid) at a generation above
        whatever is there, then delete the older slices."""
        live = await self.kube.get(f"/api/v1/nodes/{node.name}")
        owned = DraNode(
            name=node.name,
            gpus=node.gpus,
            product=node.product,
            gpus_per_pcie_root=node.gpus_per_pcie_root,
            fabric_partitions=node.fabric_partitions,
            uid=str(live["metadata"]["uid"]),
        )
        desired = slices_for(owned, layout or self.layout)
        old = await node_slices(self.kube, node.name)
        generation = 1 + max((int(s["spec"]["pool"]["generation"]) for s in old), default=0)
        created = []
        for body in desired:
            body["spec"]["pool"]["generation"] = generation
            created.append(await self.kube.post(SLICES, body))
        await self._delete([str(s["metadata"]["name"]) for s in old])
        return created

    async def publish_all(self, nodes: Iterable[DraNode], layout: Layout | None = None) -> None:
        async with asyncio.TaskGroup() as group:
            for node in nodes:
                group.create_task(self.publish(node, layout))

    async def withdraw(self, node: str) -> None:
        """Delete the node's slices (the driver's plugin going away)."""
        await self._delete([str(s["metadata"]["name"]) for s in await node_slices(self.kube, node)])

    async def _delete(self, names: Sequence[str]) -> None:
        for name in names:
            try:
                await self.kube.delete(f"{SLICES}/{name}")
            except ApiError as exc:
                if exc.status != 404:
                    raise

"""Fake GPU nodes for the local control plane: pure functions from node specs to Node dicts.

A node list is either the openb CSV of the Alibaba GPU trace (``sn,cpu_milli,memory_mib,gpu,
model``; ``num_gpu`` is accepted for ``gpu``) or a generated fleet of racks and spines. Each
node carries what a real GPU node shows the scheduler (docs/install.md): ``nvidia.com/gpu``
capacity, GPU Feature Discovery labels, rack/spine labels and the gpusched.io/gpu-inventory
annotation; plus KWOK's annotation, so only the KWOK controller plays its kubelet.
"""

from __future__ import annotations

import csv
import json
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpusched.model import keys
from gpusched.model.gpu_models import KNOWN_MODELS, canonical

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_VALUE = "fake"
KWOK_SELECTOR = f"{KWOK_ANNOTATION}={KWOK_VALUE}"
# Marks every node the harness made, so a test or `cluster-down` can find them by label.
FLEET_LABEL = "gpusched.io/devcluster"


@dataclass(frozen=True, slots=True)
class GpuModel:
    """``name`` is the short model name of the trace and of gpusched.io/gpu-model;
    ``product`` is what GPU Feature Discovery writes in nvidia.com/gpu.product."""

    name: str
    product: str
    memory_mib: int
    family: str


# One table of names for the whole project (model/gpu_models.py): what the fake nodes
# publish is what `gpusched.io/gpu-model` resolves.
GPU_MODELS: dict[str, GpuModel] = {
    m.short: GpuModel(m.short, m.product, m.memory_mib, m.family) for m in KNOWN_MODELS
}


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    gpus: int
    model: str  # key of GPU_MODELS; unknown models get 0 MiB and a product equal to the name
    cpu_milli: int
    memory_mib: int
    rack: str
    spine: str
    # Cards per NVLink island: 8-GPU boards are one island; 0 means no NVLink.
    nvlink_island_size: int = 0


def gpu_model(name: str) -> GpuModel:
    """The model of a spec, by either spelling (`A100M80` or `NVIDIA-A100-SXM4-80GB`)."""
    return GPU_MODELS.get(canonical(name)) or GpuModel(name, name, 0, "unknown")


# (gpus, model, cpu_milli, memory_mib, nvlink island size): the three shapes of the fleet.
_FLEET_SHAPES = (
    (8, "A100M80", 96_000, 1_048_576, 8),
    (8, "V100M32", 64_000, 524_288, 8),
    (2, "T4", 32_000, 131_072, 0),
)


def generated_fleet(
    count: int, *, nodes_per_rack: int = 8, racks_per_spine: int = 4
) -> list[NodeSpec]:
    """``count`` nodes: a quarter 8x80GB, a quarter 8x32GB, half 2x16GB, interleaved rack by
    rack so any prefix of the fleet has every shape; deterministic (same count, same fleet)."""
    if count < 0:
        raise ValueError(f"node count must be >= 0, got {count}")
    pattern = (0, 2, 1, 2)  # 8x80GB, 2x16GB, 8x32GB, 2x16GB, ...
    specs = []
    for i in range(count):
        gpus, model, cpu, mem, island = _FLEET_SHAPES[pattern[i % len(pattern)]]
        rack = i // nodes_per_rack
        specs.append(
            NodeSpec(
                name=f"gpu-node-{i:04d}",
                gpus=gpus,
                model=model,
                cpu_milli=cpu,
                memory_mib=mem,
                rack=f"rack-{rack:03d}",
                spine=f"spine-{rack // racks_per_spine:02d}",
                nvlink_island_size=island,
            )
        )
    return specs


def read_openb_csv(
    path: str | Path, *, limit: int | None = None, nodes_per_rack: int = 8, racks_per_spine: int = 4
) -> list[NodeSpec]:
    """Node specs from an openb node list. The trace has no topology, so racks and spines
    are assigned in file order. Rows without GPUs are kept (CPU nodes exist in the trace).
    Raises ValueError naming the line of a malformed row."""
    specs: list[NodeSpec] = []
    with Path(path).open(newline="") as handle:
        reader = csv.DictReader(handle)
        fields = set(reader.fieldnames or ())
        gpu_field = "gpu" if "gpu" in fields else "num_gpu"
        needed = {"sn", "cpu_milli", "memory_mib", gpu_field, "model"}
        if not needed <= fields:
            raise ValueError(
                f"{path}: expected columns sn,cpu_milli,memory_mib,gpu,model; got {sorted(fields)}"
            )
        for row in reader:
            if limit is not None and len(specs) >= limit:
                break
            try:
                gpus = int(row[gpu_field] or 0)
                cpu = int(float(row["cpu_milli"]))
                mem = int(float(row["memory_mib"]))
            except ValueError as exc:
                raise ValueError(f"{path}:{reader.line_num}: {exc}") from None
            i = len(specs)
            rack = i // nodes_per_rack
            specs.append(
                NodeSpec(
                    name=row["sn"].strip(),
                    gpus=gpus,
                    model=(row["model"] or "").strip(),
                    cpu_milli=cpu,
                    memory_mib=mem,
                    rack=f"rack-{rack:03d}",
                    spine=f"spine-{rack // racks_per_spine:02d}",
                    nvlink_island_size=8 if gpus == 8 else 0,
                )
            )
    return specs


def gpu_inventory(spec: NodeSpec) -> list[dict[str, Any]]:
    """The gpusched.io/gpu-inventory list; UUIDs derive from the node name so a re-created
    node keeps its card identities."""
    model = gpu_model(spec.model)
    cards = []
    for index in range(spec.gpus):
        island = index // spec.nvlink_island_size if spec.nvlink_island_size else -1
        cards.append(
            {
                "index": index,
                "uuid": "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{spec.name}/{index}")),
                "model": model.name,
                "memoryMiB": model.memory_mib,
                "nvlinkIsland": island,
                "numa": 0 if index < max(spec.gpus // 2, 1) else 1,
                "healthy": True,
            }
        )
    return cards


def node_object(spec: NodeSpec, *, kwok: bool = True) -> dict[str, Any]:
    """A Node as POSTed to /api/v1/nodes. Capacity sits in status: the API server keeps
    status on create for nodes, and KWOK copies it into its Ready status update."""
    model = gpu_model(spec.model)
    labels = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        FLEET_LABEL: "true",
        keys.RACK_LABEL: spec.rack,
        keys.SPINE_LABEL: spec.spine,
    }
    annotations = {"node.alpha.kubernetes.io/ttl": "0"}
    if kwok:
        annotations[KWOK_ANNOTATION] = KWOK_VALUE
    capacity = {
        "cpu": f"{spec.cpu_milli}m",
        "memory": f"{spec.memory_mib}Mi",
        "pods": "110",
    }
    if spec.gpus > 0:
        labels.update(
            {
                "nvidia.com/gpu.present": "true",
                keys.GFD_COUNT: str(spec.gpus),
                keys.GFD_PRODUCT: model.product,
                keys.GFD_MEMORY: str(model.memory_mib),
                "nvidia.com/gpu.family": model.family,
            }
        )
        annotations[keys.GPU_INVENTORY] = json.dumps(gpu_inventory(spec), separators=(",", ":"))
        capacity[keys.GPU_RESOURCE] = str(spec.gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec.name, "labels": labels, "annotations": annotations},
        "spec": {},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def node_objects(specs: Iterable[NodeSpec], *, kwok: bool = True) -> Iterator[dict[str, Any]]:
    return (node_object(spec, kwok=kwok) for spec in specs)

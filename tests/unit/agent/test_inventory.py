"""NVML -> gpusched.io/gpu-inventory on the fake layouts (gpusched/agent/fakes/), and the
acceptance: what the agent publishes, the scheduler's parser reads back card for card."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from gpusched.agent.fakes import _fake, gb200_tray
from gpusched.agent.fakes._fake import (
    GPU,
    NVML_ERROR_NO_PERMISSION,
    NVML_GPU_FABRIC_STATE_COMPLETED,
    NVML_GPU_FABRIC_STATE_IN_PROGRESS,
    Fabric,
    FakeGpu,
    FakeNvml,
    Link,
)
from gpusched.agent.inventory import (
    NoGpusError,
    NvmlCard,
    NvmlReadError,
    annotation_value,
    gfd_product,
    pci_bus_id,
    read_inventory,
)
from gpusched.model import keys
from gpusched.model.node import Card, node_from_k8s

FAKES = "gpusched.agent.fakes."


def layout(name: str) -> ModuleType:
    return importlib.import_module(FAKES + name)


def fresh(gpus: tuple[FakeGpu, ...], **kw: Any) -> Any:
    """A module-like object over a new FakeNvml (the layout modules share one per process)."""
    fake = FakeNvml(gpus, **kw)
    return SimpleNamespace(**fake.namespace(), FAKE=fake)


# layout -> (model, memoryMiB, islands, numa, clique, power limit W)
EXPECTED = {
    "dgx_a100": (
        "NVIDIA-A100-SXM4-40GB",
        40960,
        [0] * 8,
        [3, 3, 1, 1, 7, 7, 5, 5],
        "",
        400,
    ),
    "dgx_h100": ("NVIDIA-H100-80GB-HBM3", 81559, [0] * 8, [0, 0, 0, 0, 1, 1, 1, 1], "", 700),
    "pcie_rtx4090": (
        "NVIDIA-GeForce-RTX-4090",
        24564,
        [-1] * 8,
        [0, 0, 0, 0, 1, 1, 1, 1],
        "",
        450,
    ),
    "gb200_tray": ("NVIDIA-GB200", 189471, [0] * 4, [0, 0, 1, 1], gb200_tray.CLIQUE, 1200),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_layouts_read_as_their_topo_output_says(name: str) -> None:
    model, memory, islands, numa, clique, power = EXPECTED[name]
    nvml = layout(name)
    cards = read_inventory(nvml)
    assert [c.index for c in cards] == list(range(len(islands)))
    assert {(c.model, c.memory_mib, c.fabric_clique, c.power_limit_w) for c in cards} == {
        (model, memory, clique, power)
    }
    assert [c.nvlink_island for c in cards] == islands
    assert [c.numa for c in cards] == numa
    assert all(c.healthy and c.problems == () for c in cards)
    assert [c.uuid for c in cards] == [g.uuid for g in nvml.GPUS]
    assert nvml.FAKE.initialized == 0  # every read shuts NVML down again


def test_bridged_pairs_are_islands_by_link_not_by_index(tmp_path: Path) -> None:
    """RTX 3090s bridged (0, 2) and (1, 3); NUMA from sysfs, as GeForce has no affinity."""
    for gpu in layout("pcie_rtx3090_pairs").GPUS:
        device = tmp_path / "bus/pci/devices" / pci_bus_id(gpu.bus_id)
        device.mkdir(parents=True)
        (device / "numa_node").write_text("0\n")
    cards = read_inventory(layout("pcie_rtx3090_pairs"), sysfs_root=tmp_path)
    assert [c.nvlink_island for c in cards] == [0, 1, 0, 1]
    assert [c.numa for c in cards] == [0, 0, 0, 0]
    assert all(c.healthy for c in cards)
    # No affinity and no sysfs entry: unknown, not a guess.
    missing = read_inventory(layout("pcie_rtx3090_pairs"), sysfs_root=tmp_path / "absent")
    assert [c.numa for c in missing] == [-1] * 4


def test_connected_components_not_cliques() -> None:
    """A chain 0-1-2 is one island (NCCL rings over neighbouring links); card 3 alone is -1."""
    bus = [f"00000000:0{i}:00.0" for i in range(4)]
    links = [(Link(GPU, bus[1]),), (Link(GPU, bus[0]), Link(GPU, bus[2])), (Link(GPU, bus[1]),), ()]
    gpus = tuple(
        FakeGpu(bus_id=bus[i], name="X", uuid=f"GPU-{i}", memory_mib=1, links=links[i])
        for i in range(4)
    )
    assert [c.nvlink_island for c in read_inventory(fresh(gpus))] == [0, 0, 0, -1]


def test_inactive_links_do_not_join() -> None:
    bus = ["00000000:01:00.0", "00000000:02:00.0"]
    gpus = tuple(
        FakeGpu(
            bus_id=bus[i],
            name="X",
            uuid=f"GPU-{i}",
            memory_mib=1,
            links=(Link(GPU, bus[1 - i], active=False),),
        )
        for i in range(2)
    )
    assert [c.nvlink_island for c in read_inventory(fresh(gpus))] == [-1, -1]


def _annotated_node(value: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "gpu-node", "annotations": {keys.GPU_INVENTORY: value}},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", keys.GPU_RESOURCE: str(gpus)}},
    }


def _as_card(c: NvmlCard) -> Card:
    return Card(
        index=c.index,
        model=c.model,
        memory_mib=c.memory_mib,
        nvlink_island=c.nvlink_island,
        numa=c.numa,
        healthy=c.healthy,
        uuid=c.uuid,
        fabric_clique=c.fabric_clique,
        power_limit_w=c.power_limit_w,
    )


@pytest.mark.parametrize(
    "name", ["dgx_a100", "dgx_h100", "pcie_rtx3090_pairs", "pcie_rtx4090", "gb200_tray"]
)
def test_the_scheduler_reads_back_exactly_what_the_agent_saw(name: str) -> None:
    cards = read_inventory(layout(name))
    model = node_from_k8s(_annotated_node(annotation_value(cards), len(cards)))
    assert model.gpu_source == "inventory" and model.warnings == ()
    assert model.cards == tuple(_as_card(c) for c in cards)
    # Every field of Card is carried (a new one the agent forgets fails here).
    assert {f.name for f in dataclasses.fields(Card)} == {
        "index",
        "model",
        "memory_mib",
        "nvlink_island",
        "numa",
        "healthy",
        "uuid",
        "fabric_clique",
        "power_limit_w",
    }


def test_unhealthy_cards_read_back_unhealthy() -> None:
    base = layout("dgx_a100").GPUS
    gpus = (
        dataclasses.replace(base[0], remapped_rows=(0, 1, 0, 1)),
        dataclasses.replace(base[1], lost=True),
        *base[2:],
    )
    cards = read_inventory(fresh(gpus))
    model = node_from_k8s(_annotated_node(annotation_value(cards), 8))
    assert [c.healthy for c in model.cards] == [False, False] + [True] * 6


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"remapped_rows": (0, 0, 0, 1)}, "row remapping failed"),
        ({"remapped_rows": (0, 2, 1, 0)}, "row remapping pending"),
        ({"remapped_rows": None, "retired_pages_pending": True}, "pages pending retirement"),
        (
            {"fabric": Fabric(state=NVML_GPU_FABRIC_STATE_IN_PROGRESS)},
            "fabric registration not finished",
        ),
        (
            {
                "fabric": Fabric(
                    state=NVML_GPU_FABRIC_STATE_COMPLETED, status=NVML_ERROR_NO_PERMISSION
                )
            },
            "fabric registration failed",
        ),
    ],
)
def test_what_makes_a_card_unhealthy(change: dict[str, Any], says: str) -> None:
    base = layout("dgx_a100").GPUS
    gpus = (dataclasses.replace(base[0], **change), *base[1:])
    cards = read_inventory(fresh(gpus))
    assert not cards[0].healthy and any(says in p for p in cards[0].problems), cards[0]
    assert all(c.healthy for c in cards[1:])


def test_pre_ampere_without_pending_pages_is_healthy() -> None:
    base = layout("dgx_a100").GPUS
    gpus = (
        dataclasses.replace(base[0], remapped_rows=None, retired_pages_pending=False),
        *base[1:],
    )
    assert all(c.healthy for c in read_inventory(fresh(gpus)))


def test_a_lost_card_keeps_its_last_identity() -> None:
    base = layout("dgx_a100").GPUS
    before = read_inventory(fresh(base))
    gpus = (*base[:3], dataclasses.replace(base[3], lost=True), *base[4:])
    after = read_inventory(fresh(gpus), previous=before)
    lost = after[3]
    assert not lost.healthy and "GPU is lost" in lost.problems[0]
    assert (lost.uuid, lost.model, lost.memory_mib, lost.numa) == (
        before[3].uuid,
        before[3].model,
        40960,
        1,
    )
    assert [c.nvlink_island for i, c in enumerate(after) if i != 3] == [0] * 7
    # Lost at the first read: the slot is listed, unhealthy, without an identity.
    blank = read_inventory(fresh(gpus))[3]
    assert (blank.healthy, blank.uuid, blank.memory_mib) == (False, "", 0)


def test_no_gpu_and_no_library_are_named() -> None:
    with pytest.raises(NoGpusError, match=r"NVML lists no GPU.*NVIDIA_VISIBLE_DEVICES"):
        read_inventory(layout("no_gpus"))
    assert layout("no_gpus").FAKE.initialized == 0
    with pytest.raises(NvmlReadError, match=r"libnvidia-ml\.so\.1\) not found"):
        read_inventory(layout("no_library"))


def test_an_unexpected_error_fails_the_read_and_shuts_down() -> None:
    class Denied(FakeNvml):
        def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:  # noqa: N802 - pynvml's name
            raise _fake.NVMLError(NVML_ERROR_NO_PERMISSION)

    fake = Denied(layout("dgx_a100").GPUS)
    with pytest.raises(NvmlReadError, match="card 0: UUID: Insufficient Permissions"):
        read_inventory(SimpleNamespace(**fake.namespace()))
    assert fake.initialized == 0


def test_names_and_bus_ids() -> None:
    assert gfd_product("NVIDIA A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB"
    assert gfd_product("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"
    assert pci_bus_id(b"00000000:0F:00.0\x00\x00") == "0000:0f:00.0"
    assert pci_bus_id("0000:C4:00.0") == "0000:c4:00.0"


def test_annotation_is_compact_json_by_index() -> None:
    cards = [NvmlCard(1, "GPU-b", "M", 2), NvmlCard(0, "GPU-a", "M", 1)]
    assert annotation_value(cards) == (
        '[{"index":0,"uuid":"GPU-a","model":"M","memoryMiB":1,"nvlinkIsland":-1,"numa":-1,'
        '"healthy":true,"fabricClique":"","powerLimitW":0},'
        '{"index":1,"uuid":"GPU-b","model":"M","memoryMiB":2,"nvlinkIsland":-1,"numa":-1,'
        '"healthy":true,"fabricClique":"","powerLimitW":0}]'
    )

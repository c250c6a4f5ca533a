"""An in-memory NVML with pynvml's function names, error class and constants.

Only the subset gpusched/agent/inventory.py calls. A layout is a tuple of FakeGpu; every
call checks nvmlInit was called (NVML answers NVML_ERROR_UNINITIALIZED otherwise), so a
reader that forgets it fails here as it would on a real node. Failures of a real node are
fields of FakeGpu (a lost GPU, a pending row remap, a fabric not yet registered), and
`init_error` makes nvmlInit itself fail (no driver library in the container).
"""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

# pynvml's values (nvidia-ml-py 13.615): the reader compares against the loaded module's
# constants, so these must be the library's numbers for a fake to stand in for it.
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_UNKNOWN = 999
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
NVML_AFFINITY_SCOPE_NODE = 0
NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0
NVML_GPU_FABRIC_STATE_NOT_STARTED = 1
NVML_GPU_FABRIC_STATE_IN_PROGRESS = 2
NVML_GPU_FABRIC_STATE_COMPLETED = 3

_CONSTANTS = {k: v for k, v in dict(globals()).items() if k.startswith("NVML_")}

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
}


class NVMLError(Exception):
    """pynvml.NVMLError's contract: the NVML return code in `.value`."""

    def __init__(self, value: int) -> None:
        self.value = value
        super().__init__(_MESSAGES.get(value, f"NVML Error with code {value}"))


MIB = 1024 * 1024
GPU = NVML_NVLINK_DEVICE_TYPE_GPU
SWITCH = NVML_NVLINK_DEVICE_TYPE_SWITCH


@dataclass(frozen=True)
class Link:
    """One NVLink: the device type at the far end and its PCI bus id ("" when NVML cannot
    name it: nvmlDeviceGetNvLinkRemotePciInfo then answers NOT_SUPPORTED)."""

    remote_type: int
    remote_bus: str = ""
    active: bool = True


@dataclass(frozen=True)
class Fabric:
    """nvmlGpuFabricInfo: registration with the NVLink fabric (multi-node domains)."""

    state: int
    status: int = NVML_SUCCESS
    cluster_uuid: str = "00000000-0000-0000-0000-000000000000"
    clique_id: int = 0


@dataclass(frozen=True)
class FakeGpu:
    bus_id: str  # nvmlPciInfo_t.busId, e.g. "00000000:07:00.0"
    name: str
    uuid: str
    memory_mib: int
    numa: int | None = None  # nvmlDeviceGetMemoryAffinity's node; None: NOT_SUPPORTED
    links: tuple[Link, ...] = ()
    fabric: Fabric | None = None  # None: nvmlDeviceGetGpuFabricInfoV is NOT_SUPPORTED
    power_limit_mw: int | None = None
    # nvmlDeviceGetRemappedRows: (corrected, uncorrected, pending, failed); None before
    # Ampere (NOT_SUPPORTED), where retired pages are asked instead.
    remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0)
    retired_pages_pending: bool | None = False  # None: NOT_SUPPORTED
    lost: bool = False  # every query of the card answers NVML_ERROR_GPU_IS_LOST


class FabricInfo:
    """c_nvmlGpuFabricInfoV_t's fields as the reader fills and reads them."""

    def __init__(self) -> None:
        self.clusterUuid: Sequence[int] = bytes(16)
        self.status = NVML_SUCCESS
        self.cliqueId = 0
        self.state = NVML_GPU_FABRIC_STATE_NOT_SUPPORTED


@dataclass
class FakeNvml:
    gpus: tuple[FakeGpu, ...]
    init_error: int | None = None
    initialized: int = 0  # nvmlInit calls not yet matched by nvmlShutdown

    # -- library -------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._check()
        self.initialized -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._check()
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[index]

    # -- identity ------------------------------------------------------------------------
    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str:
        return self._live(gpu).name

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        return self._live(gpu).uuid

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> Any:
        total = self._live(gpu).memory_mib * MIB
        return SimpleNamespace(total=total, free=total, used=0)

    def nvmlDeviceGetPciInfo(self, gpu: FakeGpu) -> Any:
        return SimpleNamespace(busId=self._live(gpu).bus_id.encode())

    def nvmlDeviceGetMemoryAffinity(self, gpu: FakeGpu, node_set_size: int, scope: int) -> Any:
        numa = self._live(gpu).numa
        if numa is None or scope != NVML_AFFINITY_SCOPE_NODE:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        words = [0] * node_set_size
        words[numa // 64] |= 1 << (numa % 64)
        return words

    def nvmlDeviceGetEnforcedPowerLimit(self, gpu: FakeGpu) -> int:
        limit = self._live(gpu).power_limit_mw
        if limit is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return limit

    # -- NVLink --------------------------------------------------------------------------
    def _link(self, gpu: FakeGpu, link: int) -> Link:
        live = self._live(gpu)
        if not 0 <= link < NVML_NVLINK_MAX_LINKS:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if not live.links:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if link >= len(live.links):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return live.links[link]

    def nvmlDeviceGetNvLinkState(self, gpu: FakeGpu, link: int) -> int:
        return NVML_FEATURE_ENABLED if self._link(gpu, link).active else NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, gpu: FakeGpu, link: int) -> int:
        return self._link(gpu, link).remote_type

    def nvmlDeviceGetNvLinkRemotePciInfo(self, gpu: FakeGpu, link: int) -> Any:
        remote = self._link(gpu, link).remote_bus
        if not remote:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(busId=remote.encode())

    # -- fabric and health ---------------------------------------------------------------
    def nvmlDeviceGetGpuFabricInfoV(self, gpu: FakeGpu, info: FabricInfo) -> int:
        fabric = self._live(gpu).fabric
        if fabric is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        info.state = fabric.state
        info.status = fabric.status
        info.cliqueId = fabric.clique_id
        info.clusterUuid = uuid_module.UUID(fabric.cluster_uuid).bytes
        return NVML_SUCCESS

    def nvmlDeviceGetRemappedRows(self, gpu: FakeGpu) -> tuple[int, int, int, int]:
        rows = self._live(gpu).remapped_rows
        if rows is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return rows

    def nvmlDeviceGetRetiredPagesPendingStatus(self, gpu: FakeGpu) -> int:
        pending = self._live(gpu).retired_pages_pending
        if pending is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return NVML_FEATURE_ENABLED if pending else NVML_FEATURE_DISABLED

    # -- plumbing ------------------------------------------------------------------------
    def _check(self) -> None:
        if self.initialized <= 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def _live(self, gpu: FakeGpu) -> FakeGpu:
        self._check()
        if gpu.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return gpu

    def namespace(self) -> dict[str, object]:
        """What a layout module exports: pynvml's names bound to this fake."""
        names: dict[str, object] = {
            name: getattr(self, name) for name in dir(self) if name.startswith("nvml")
        }
        names.update(_CONSTANTS)
        names["NVMLError"] = NVMLError
        names["c_nvmlGpuFabricInfoV_t"] = FabricInfo
        return names


def nvswitch_links(switches: Sequence[str], per_switch: Sequence[int]) -> tuple[Link, ...]:
    """A GPU's links to NVSwitches: per_switch[i] links to the switch at bus switches[i]."""
    return tuple(
        Link(SWITCH, bus)
        for bus, count in zip(switches, per_switch, strict=True)
        for _ in range(count)
    )


def card_uuid(machine: str, index: int) -> str:
    """A stable made-up card UUID in NVML's form (GPU-<uuid>)."""
    return "GPU-" + str(uuid_module.uuid5(uuid_module.NAMESPACE_DNS, f"{machine}/{index}"))

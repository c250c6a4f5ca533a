"""A PCIe workstation with four RTX 3090s joined in pairs by NVLink bridges.

Source: aikitoria/open-gpu-kernel-modules pull request #18 (comment of 2026-04-05,
https://github.com/aikitoria/open-gpu-kernel-modules/pull/18), `nvidia-smi topo -m` of a
"quad RTX 3090 setup with NVLinked pairs":

            GPU0    GPU1    GPU2    GPU3    CPU Affinity    NUMA Affinity   GPU NUMA ID
    GPU0     X      PHB     NV4     NODE    0-23    0               N/A
    GPU1    PHB      X      NODE    NV4     0-23    0               N/A
    GPU2    NV4     NODE     X      PHB     0-23    0               N/A
    GPU3    NODE    NV4     PHB      X      0-23    0               N/A

The bridged pairs are (0, 2) and (1, 3), not neighbours by index: the islands must come
from the links, not from the card order. GeForce cards answer NOT_SUPPORTED to the NUMA
affinity, row-remapping and page-retirement queries, so the NUMA node comes from sysfs
(/sys/bus/pci/devices/<bus id>/numa_node). Bus ids and UUIDs are made up; 350 W is the
RTX 3090's default power limit.
"""

from gpusched.agent.fakes._fake import GPU, FakeGpu, FakeNvml, Link, card_uuid

BUSES = ("00000000:01:00.0", "00000000:21:00.0", "00000000:41:00.0", "00000000:61:00.0")
PEER = (2, 3, 0, 1)

GPUS = tuple(
    FakeGpu(
        bus_id=bus,
        name="NVIDIA GeForce RTX 3090",
        uuid=card_uuid("rtx3090-pairs", i),
        memory_mib=24576,
        numa=None,
        links=(Link(GPU, BUSES[PEER[i]]),) * 4,
        power_limit_mw=350_000,
        remapped_rows=None,
        retired_pages_pending=None,
    )
    for i, bus in enumerate(BUSES)
)
FAKE = FakeNvml(GPUS)
globals().update(FAKE.namespace())

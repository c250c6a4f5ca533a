"""A PCIe server with eight RTX 4090s and no NVLink at all.

Source: NVIDIA/go-gpuallocator issue #17 ("Take CPU Affinity into consideration for Best
Effort", https://github.com/NVIDIA/go-gpuallocator/issues/17), `nvidia topo -m` of an
8-card 4090 server:

        GPU0  GPU1  GPU2  GPU3  GPU4  GPU5  GPU6  GPU7  NIC0  NIC1  CPU Affinity  NUMA Affinity
GPU0     X    SYS   SYS   SYS   SYS   SYS   SYS   SYS   SYS   SYS   0-55,112-167    0
GPU1    SYS    X    SYS   SYS   SYS   SYS   SYS   SYS   SYS   SYS   0-55,112-167    0
GPU2    SYS   SYS    X    SYS   SYS   SYS   SYS   SYS   SYS   SYS   0-55,112-167    0
GPU3    SYS   SYS   SYS    X    SYS   SYS   SYS   SYS   SYS   SYS   0-55,112-167    0
GPU4    SYS   SYS   SYS   SYS    X    SYS   SYS   SYS   SYS   SYS   56-111,168-223  1
GPU5    SYS   SYS   SYS   SYS   SYS    X    SYS   SYS   SYS   SYS   56-111,168-223  1
GPU6    SYS   SYS   SYS   SYS   SYS   SYS    X    SYS   PHB   PHB   56-111,168-223  1
GPU7    SYS   SYS   SYS   SYS   SYS   SYS   SYS    X    SYS   SYS   56-111,168-223  1

No card is in an NVLink island (nvlinkIsland -1 for all). Bus ids and UUIDs are made up;
450 W is the RTX 4090's default power limit.
"""

from gpusched.agent.fakes._fake import FakeGpu, FakeNvml, card_uuid

GPUS = tuple(
    FakeGpu(
        bus_id=f"00000000:{0x11 + 0x10 * i:02X}:00.0",
        name="NVIDIA GeForce RTX 4090",
        uuid=card_uuid("rtx4090", i),
        memory_mib=24564,
        numa=0 if i < 4 else 1,
        power_limit_mw=450_000,
        remapped_rows=None,
        retired_pages_pending=None,
    )
    for i in range(8)
)
FAKE = FakeNvml(GPUS)
globals().update(FAKE.namespace())

"""A DGX H100 (8x H100 80GB HBM3, four NVSwitches): every pair of cards NV18.

Source: NVIDIA/nccl issue #1363 ("Encountering Random Segmentation Fault During
NCCL-Tests", https://github.com/NVIDIA/nccl/issues/1363), `nvidia-smi topo -m` of an
8x H100 node:

            GPU0  GPU1  GPU2  GPU3  GPU4  GPU5  GPU6  GPU7  ...  CPU Affinity    NUMA Affinity
    GPU0     X    NV18  NV18  NV18  NV18  NV18  NV18  NV18  ...  0-55,112-167    0
    GPU1    NV18   X    NV18  NV18  NV18  NV18  NV18  NV18  ...  0-55,112-167    0
    GPU2    NV18  NV18   X    NV18  NV18  NV18  NV18  NV18  ...  0-55,112-167    0
    GPU3    NV18  NV18  NV18   X    NV18  NV18  NV18  NV18  ...  0-55,112-167    0
    GPU4    NV18  NV18  NV18  NV18   X    NV18  NV18  NV18  ...  56-111,168-223  1
    GPU5    NV18  NV18  NV18  NV18  NV18   X    NV18  NV18  ...  56-111,168-223  1
    ...

(deepseek-ai/DeepEP issue #145 shows the same NV18 matrix on another H100 node.) GPU6-7
are cut from the excerpt and sit on NUMA node 1 with GPU4-5. The 18 links of each card go
to four NVSwitches; how they split (5/4/4/5 here) does not change the island. Bus ids of
cards and switches and the UUIDs are made up. Hopper registers with the NVLink fabric even
in one node: state COMPLETED with a zero cluster UUID, which is no multi-node clique (GPU
Feature Discovery's rule). 700 W is the H100 SXM5 power limit.
"""

from gpusched.agent.fakes._fake import (
    NVML_GPU_FABRIC_STATE_COMPLETED,
    Fabric,
    FakeGpu,
    FakeNvml,
    card_uuid,
    nvswitch_links,
)

SWITCHES = tuple(f"00000000:{bus}:00.0" for bus in ("05", "06", "07", "08"))
BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")

GPUS = tuple(
    FakeGpu(
        bus_id=f"00000000:{bus}:00.0",
        name="NVIDIA H100 80GB HBM3",
        uuid=card_uuid("dgx-h100", i),
        memory_mib=81559,
        numa=0 if i < 4 else 1,
        links=nvswitch_links(SWITCHES, (5, 4, 4, 5)),
        fabric=Fabric(state=NVML_GPU_FABRIC_STATE_COMPLETED),
        power_limit_mw=700_000,
    )
    for i, bus in enumerate(BUSES)
)
FAKE = FakeNvml(GPUS)
globals().update(FAKE.namespace())

"""A DGX A100 (8x A100-SXM4-40GB, six NVSwitches): every pair of cards NV12.

Source: NVIDIA/nccl issue #1505 ("Question on DGX A100 GPU topologies",
https://github.com/NVIDIA/nccl/issues/1505), `nvidia-smi topo -m` on a DGX A100 40GB:

            GPU0  GPU1  GPU2  GPU3  GPU4  GPU5  GPU6  GPU7  ...  CPU Affinity    NUMA Affinity
    GPU0     X    NV12  NV12  NV12  NV12  NV12  NV12  NV12  ...  48-63,176-191   3
    GPU1    NV12   X    NV12  NV12  NV12  NV12  NV12  NV12  ...  48-63,176-191   3
    GPU2    NV12  NV12   X    NV12  NV12  NV12  NV12  NV12  ...  16-31,144-159   1
    GPU3    NV12  NV12  NV12   X    NV12  NV12  NV12  NV12  ...  16-31,144-159   1
    GPU4    NV12  NV12  NV12  NV12   X    NV12  NV12  NV12  ...  112-127,240-255 7
    ...

The same issue's NCCL topology dump shows how NV12 is wired: GPU0 (0000:07:00.0) has
`<nvlink target="0000:c4..c9:00.0" count="2">` to six NVSwitches, 2 links each. The rows of
GPU5-7 are cut from the quoted excerpt; GPU5 shares GPU4's NUMA node and GPU6-7 are on node
5 as on every DGX A100 (NPS4: nodes 3, 1, 7, 5 from GPU0 up). Bus ids of GPU1-7 are the
DGX A100's usual ones; UUIDs are made up. 400 W is the A100-SXM4 power limit.
"""

from gpusched.agent.fakes._fake import FakeGpu, FakeNvml, card_uuid, nvswitch_links

SWITCHES = tuple(f"00000000:{bus}:00.0" for bus in ("C4", "C5", "C6", "C7", "C8", "C9"))
BUSES = ("07", "0F", "47", "4E", "87", "90", "B7", "BD")
NUMA = (3, 3, 1, 1, 7, 7, 5, 5)

GPUS = tuple(
    FakeGpu(
        bus_id=f"00000000:{bus}:00.0",
        name="NVIDIA A100-SXM4-40GB",
        uuid=card_uuid("dgx-a100", i),
        memory_mib=40960,
        numa=NUMA[i],
        links=nvswitch_links(SWITCHES, (2,) * 6),
        power_limit_mw=400_000,
    )
    for i, bus in enumerate(BUSES)
)
FAKE = FakeNvml(GPUS)
globals().update(FAKE.namespace())

"""One compute tray of a GB200 NVL72 rack: four GPUs in a multi-node NVLink domain.

Source: NVIDIA/k8s-test-infra issue #371 ("feat(nvml-mock): NVSwitch + nvidia-fabricmanager
simulation", comment of 2026-06-11, https://github.com/NVIDIA/k8s-test-infra/issues/371),
`nvidia-smi topo -m` of a GB200:

            GPU0    GPU1    GPU2    GPU3    CPU Affinity    NUMA Affinity   GPU NUMA ID
    GPU0     X      NV18    NV18    NV18    0-71    0               N/A
    GPU1    NV18     X      NV18    NV18    0-71    0               N/A
    GPU2    NV18    NV18     X      NV18    72-143  1               N/A
    GPU3    NV18    NV18    NV18     X      72-143  1               N/A

The 18 links of each GPU go to the rack's NVSwitch trays, outside this host: NVML names
the far end a switch but has no PCI address for it (NOT_SUPPORTED), as NCCL also assumes
for NVLinks whose remote it cannot see (NVIDIA/nccl issue #1182). The fabric manager
registered every GPU in the same clique of one cluster; the cluster UUID, clique id, card
UUIDs, bus ids, the memory size (GB200's 186 GB class) and the 1200 W limit are made up.
"""

from gpusched.agent.fakes._fake import (
    NVML_GPU_FABRIC_STATE_COMPLETED,
    SWITCH,
    Fabric,
    FakeGpu,
    FakeNvml,
    Link,
    card_uuid,
)

CLUSTER_UUID = "5b2d7c1e-9f04-4a8e-b3c6-0d1e2f3a4b5c"
CLIQUE_ID = 32766
CLIQUE = f"{CLUSTER_UUID}.{CLIQUE_ID}"  # nvidia.com/gpu.clique as GFD writes it

GPUS = tuple(
    FakeGpu(
        bus_id=f"00000008:{bus}:00.0",
        name="NVIDIA GB200",
        uuid=card_uuid("gb200-tray", i),
        memory_mib=189471,
        numa=0 if i < 2 else 1,
        links=(Link(SWITCH),) * 18,
        fabric=Fabric(
            state=NVML_GPU_FABRIC_STATE_COMPLETED,
            cluster_uuid=CLUSTER_UUID,
            clique_id=CLIQUE_ID,
        ),
        power_limit_mw=1_200_000,
    )
    for i, bus in enumerate(("01", "02", "03", "04"))
)
FAKE = FakeNvml(GPUS)
globals().update(FAKE.namespace())

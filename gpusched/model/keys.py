"""Every label and annotation key users read or write (README "What a pod can say",
docs/install.md "What the nodes must show")."""

SCHEDULER_NAME = "ai-scheduler"

GPU_RESOURCE = "nvidia.com/gpu"

# Pods
GPU_MILLI = "gpusched.io/gpu-milli"
GPU_MEMORY_MIB = "gpusched.io/gpu-memory-mib"
GPU_MODEL = "gpusched.io/gpu-model"
NVLINK = "gpusched.io/nvlink"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
GANG_NAME = "scheduling.ai/gang-name"
GANG_TOTAL = "scheduling.ai/gang-total"
JOB_ID_LABEL = "ai.training/job-id"
# A gang's topology: "rack", "spine" or the NVLink fabric clique label (GFD_CLIQUE), on the
# PodGroup (or on an annotation gang's pods).
TOPOLOGY_REQUIRED = "gpusched.io/topology-required"
TOPOLOGY_PREFERRED = "gpusched.io/topology-preferred"
TENANT_LABEL = "gpusched.io/tenant"
PREEMPTIBLE = "gpusched.io/preemptible"
LAST_CHECKPOINT = "gpusched.io/last-checkpoint-time"
CHECKPOINT_INTERVAL = "gpusched.io/checkpoint-interval-seconds"

# Written by the scheduler before Bind
GPU_IDS = "gpusched.io/gpu-ids"
GPU_MILLI_ASSIGNED = "gpusched.io/gpu-milli-assigned"

# Nodes
GPU_INVENTORY = "gpusched.io/gpu-inventory"
GFD_COUNT = "nvidia.com/gpu.count"
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY = "nvidia.com/gpu.memory"
RACK_LABEL = "topology.gpusched.io/rack"
SPINE_LABEL = "topology.gpusched.io/spine"
# GPU Feature Discovery's multi-node NVLink fabric domain: "<ClusterUUID>.<CliqueId>" (the
# cards' NVML GpuFabricInfo), set only when every fabric-attached card agrees on both.
GFD_CLIQUE = "nvidia.com/gpu.clique"
TOPOLOGY_TIERS = ("rack", "spine", GFD_CLIQUE)

# Every pod annotation the parser validates, so an unknown gpusched.io/ key can be flagged.
POD_ANNOTATIONS = (
    GPU_MILLI,
    GPU_MEMORY_MIB,
    GPU_MODEL,
    NVLINK,
    GANG_NAME,
    GANG_TOTAL,
    TOPOLOGY_REQUIRED,
    TOPOLOGY_PREFERRED,
    PREEMPTIBLE,
    LAST_CHECKPOINT,
    CHECKPOINT_INTERVAL,
    GPU_IDS,
    GPU_MILLI_ASSIGNED,
)

"""Helpers shared by the standard plugins (kube-scheduler's framework/plugins/helper).

Plugin folders never import each other (import-linter holds them apart); what several
plugins share lives here: score normalisation and toleration matching (exported below),
and, imported by module, `gpu_state` (what GPUFit computes once per pod and the other GPU
plugins read), `fgd_target` (the FGD target workload and fragmentation cache, also the
simulator's), `row_cache` (per-row results of recent request shapes), `node_selector` and
`label_index` (node selectors and topology domains over the snapshot's label sets:
NodeAffinity, PodTopologySpread, InterPodAffinity), `pod_selector` (label selectors over
pods and namespaces: InterPodAffinity, PodTopologySpread).
"""

from gpusched.plugins.helper.normalize import default_normalize_score
from gpusched.plugins.helper.tolerations import (
    NO_EXECUTE,
    NO_SCHEDULE,
    PREFER_NO_SCHEDULE,
    TAINT_NODE_UNSCHEDULABLE,
    Toleration,
    parse_tolerations,
    taint_text,
    tolerated,
    tolerates,
)

__all__ = [
    "NO_EXECUTE",
    "NO_SCHEDULE",
    "PREFER_NO_SCHEDULE",
    "TAINT_NODE_UNSCHEDULABLE",
    "Toleration",
    "default_normalize_score",
    "parse_tolerations",
    "taint_text",
    "tolerated",
    "tolerates",
]

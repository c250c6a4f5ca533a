"""Helpers shared by the standard plugins (kube-scheduler's framework/plugins/helper)."""

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

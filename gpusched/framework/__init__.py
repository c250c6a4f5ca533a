"""The public plugin contract: what plugins read and return.

Statuses, cycle state, one Protocol per extension point (points.py: the points defined
once), the snapshot columns plugins read (snapshot.py) and the plugin registry. Imports
only the model: config, core and the plugins are built on it.
"""

from gpusched.framework.cycle_state import CycleState, StateKey
from gpusched.framework.interfaces import (
    ALLOCATION,
    BINDING_ANNOTATIONS,
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    Allocation,
    BindPlugin,
    ClusterPort,
    Diagnosis,
    FilterPlugin,
    FilterResult,
    Handle,
    Mask,
    NormalizeScorePlugin,
    PermitPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    Rows,
    ScorePlugin,
    Scores,
    WarmStartPlugin,
)
from gpusched.framework.points import POINT_METHODS, PROTOCOLS, Point, implements
from gpusched.framework.registry import PluginSpec, Registry
from gpusched.framework.snapshot import MAX_CARDS_LIMIT, NO_CARD, Interner, NodeColumns
from gpusched.framework.status import INVALID_POD, Code, Status

__all__ = [
    "ALLOCATION",
    "BINDING_ANNOTATIONS",
    "INVALID_POD",
    "MAX_CARDS_LIMIT",
    "MAX_NODE_SCORE",
    "MIN_NODE_SCORE",
    "NO_CARD",
    "POINT_METHODS",
    "PROTOCOLS",
    "Allocation",
    "BindPlugin",
    "ClusterPort",
    "Code",
    "CycleState",
    "Diagnosis",
    "FilterPlugin",
    "FilterResult",
    "Handle",
    "Interner",
    "Mask",
    "NodeColumns",
    "NormalizeScorePlugin",
    "PermitPlugin",
    "Plugin",
    "PluginSpec",
    "Point",
    "PostBindPlugin",
    "PostFilterPlugin",
    "PreBindPlugin",
    "PreFilterPlugin",
    "PreFilterResult",
    "PreScorePlugin",
    "QueueSortPlugin",
    "Registry",
    "ReservePlugin",
    "Rows",
    "ScorePlugin",
    "Scores",
    "StateKey",
    "Status",
    "WarmStartPlugin",
    "implements",
]

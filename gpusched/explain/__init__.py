"""`gpusched explain`: why a pod is pending and the smallest change that would let it fit,
computed by the scheduler's own framework and plugins on a copy of its state (docs/explain.md).

    world.py            Facts (the scheduler's state at one instant) -> World (a private copy
                        built by the daemon's own cache, handle, frameworks, event handlers)
    attempt.py          one dry cycle: PreEnqueue, PreFilter, Filter, every node's verdict
    engine.py           the binding constraint, the report (Explainer, Explanation)
    counterfactuals.py  each constraint's smallest change, verified by another dry cycle
    render.py           the report for people
"""

from gpusched.explain.counterfactuals import Change
from gpusched.explain.engine import Explainer, Explanation
from gpusched.explain.world import (
    Facts,
    NodeReadings,
    PluginState,
    QuotaOverride,
    World,
    plugin_states,
    readings_of,
)

__all__ = [
    "Change",
    "Explainer",
    "Explanation",
    "Facts",
    "NodeReadings",
    "PluginState",
    "QuotaOverride",
    "World",
    "plugin_states",
    "readings_of",
]

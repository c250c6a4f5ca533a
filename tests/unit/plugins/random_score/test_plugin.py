"""RandomScore: the FGD paper's Random baseline."""

from __future__ import annotations

import numpy as np

from gpusched.core.handle import SchedulerHandle
from gpusched.framework import CycleState
from gpusched.plugins.random_score import RandomScore
from tests.builders import cache_with, make_pod
from tests.fakes import Clock, FakeCluster


def _plugin() -> RandomScore:
    return RandomScore(None, SchedulerHandle(cache_with("a", "b", "c"), FakeCluster(), Clock()))


def test_prescore_picks_one_node_that_alone_scores_100() -> None:
    plugin, state, rows = _plugin(), CycleState(), np.arange(3)
    plugin.pre_score(state, make_pod(), rows)
    assert sorted(plugin.score(state, make_pod(), rows).tolist()) == [0.0, 0.0, 100.0]


def test_score_without_its_prescore_ties_every_node() -> None:
    """A profile may disable RandomScore's PreScore: Score raised KeyError("cycle state has
    no 'RandomScore/pick'") for every pod (found by the config fuzz test)."""
    scores = _plugin().score(CycleState(), make_pod(), np.arange(3))
    assert scores.tolist() == [0.0, 0.0, 0.0]

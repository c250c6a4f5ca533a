"""ScheduleOne activates the pods a cycle named (PODS_TO_ACTIVATE) only when the cycle
succeeded, as kube-scheduler does (found by the gang replay, which hung)."""

from __future__ import annotations

import dataclasses

from gpusched.core.schedule_one import Result
from gpusched.model.node import Taint
from tests.builders import ai_sim, gang_pod, gpu_node


def test_members_refused_at_filter_do_not_wake_each_other_forever() -> None:
    """GangScheduling's PreFilter admits the gang on free cards (it does not see taints)
    and names the sibling to activate; Filter then refuses it (TaintToleration leaves one
    node). At the branch point of this test ScheduleOne activated the sibling after the
    failed cycle too, and the two members re-activated each other past their backoff
    forever (the gang replay hung). Two guards now: ScheduleOne activates only after a
    successful cycle (kube-scheduler's schedulingCycle), and GangScheduling holds a gang
    that failed to assemble back (main's 17b1ff5); either alone keeps this test green."""
    tainted = dataclasses.replace(
        gpu_node("n1", rack="r0"), taints=(Taint("x.io/busy", "", "NoSchedule"),)
    )
    s = ai_sim(gpu_node("n0", rack="r0"), tainted)
    for name in ("a", "b"):
        s.events.pod_changed(gang_pod(name, "g", 2))
    for _ in range(10):  # bounded: the old behaviour never empties activeQ
        info = s.queue.pop_nowait()
        if info is None:
            break
        d = s.schedule_one.attempt(info)
        assert d is not None and d.result is Result.UNSCHEDULABLE
    assert s.queue.pop_nowait() is None
    assert s.schedule_one.attempts == 2

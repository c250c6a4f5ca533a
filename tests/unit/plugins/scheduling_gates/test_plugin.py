"""SchedulingGates: a gated pod is refused at PreEnqueue with kube's message."""

from __future__ import annotations

from gpusched.framework import PreEnqueuePlugin
from gpusched.framework.status import Code
from gpusched.plugins.scheduling_gates import SchedulingGates
from tests.builders import pod, snapshot
from tests.fakes import FakeHandle


def plugin() -> SchedulingGates:
    p = SchedulingGates(None, FakeHandle(snapshot()))
    assert isinstance(p, PreEnqueuePlugin)
    return p


def test_ungated_pod_passes() -> None:
    assert plugin().pre_enqueue(pod()).is_success()


def test_gated_pod_refused_unresolvable_with_kube_message() -> None:
    st = plugin().pre_enqueue(pod(scheduling_gates=("example.com/a", "example.com/b")))
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message() == "waiting for scheduling gates: [example.com/a example.com/b]"

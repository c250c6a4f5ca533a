"""The PodGroup status computations (operator/status.py): scheduler-plugins' controller
phases and counts, and kube-scheduler's PodGroupScheduled condition."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpusched.framework.gangs import PodGroupSpec
from gpusched.model.pod import GangAPI
from gpusched.operator.board import GangReport
from gpusched.operator.status import (
    COSCHEDULING_FIELDS,
    coscheduling_status,
    merge_patch,
    rfc3339,
    waiting_message,
    workload_conditions,
)

X = GangAPI.COSCHEDULING
W = GangAPI.WORKLOAD
T0 = datetime(2026, 12, 1, tzinfo=UTC).timestamp()


def report(**counts: Any) -> GangReport:
    return GangReport(api=X, key="ns/pg", **counts)


def test_a_new_group_without_pods_is_pending() -> None:
    assert coscheduling_status({}, 2, None) == {"phase": "Pending"}


def test_enough_pods_pending_is_scheduling_with_owner_and_start_time() -> None:
    r = report(pending=2, first_attempt=T0, owner="ns/job-a")
    assert coscheduling_status({"phase": "Pending"}, 2, r) == {
        "phase": "Scheduling",
        "occupiedBy": "ns/job-a",
        "scheduleStartTime": "2026-12-01T00:00:00Z",
    }


def test_fewer_pods_than_min_member_stays_pending() -> None:
    assert coscheduling_status({}, 3, report(pending=2)) == {"phase": "Pending"}


def test_placed_but_not_running_is_scheduling() -> None:
    status = {"phase": "Scheduling", "occupiedBy": "ns/job-a"}
    out = coscheduling_status(status, 2, report(placed=1, running=1))
    assert out == {"phase": "Scheduling", "occupiedBy": "ns/job-a", "running": 1}


def test_min_member_running_is_running() -> None:
    out = coscheduling_status({"phase": "Scheduling"}, 2, report(running=2, pending=1))
    assert out == {"phase": "Running", "running": 2}


def test_running_straight_from_an_unset_phase() -> None:
    # The controller needs three reconciles for this; the fixed point is the same.
    assert coscheduling_status({}, 2, report(running=2))["phase"] == "Running"


def test_succeeded_reaching_min_member_is_finished_and_final() -> None:
    out = coscheduling_status({"phase": "Running", "running": 2}, 2, report(succeeded=2))
    assert out == {"phase": "Finished", "succeeded": 2}
    # Final: later reports change nothing.
    assert coscheduling_status(out, 2, report()) == out


def test_a_failure_counting_toward_min_member_is_failed() -> None:
    out = coscheduling_status({"phase": "Running"}, 3, report(running=2, failed=1))
    assert out == {"phase": "Failed", "running": 2, "failed": 1}


def test_a_failed_pod_below_min_member_is_not_failed() -> None:
    out = coscheduling_status({"phase": "Scheduling"}, 4, report(pending=3, failed=1))
    assert out["phase"] == "Scheduling"


def test_losing_pods_below_min_member_is_pending_again() -> None:
    out = coscheduling_status({"phase": "Running", "running": 2}, 2, report(running=1))
    assert out == {"phase": "Pending", "running": 1}


def test_finished_counts_never_go_below_the_objects() -> None:
    # A restarted daemon did not see the pods that finished before it started.
    out = coscheduling_status({"phase": "Running", "succeeded": 1}, 3, report(running=2))
    assert out["succeeded"] == 1
    assert out["phase"] == "Running"


def test_the_start_time_is_written_once() -> None:
    status = {"phase": "Scheduling", "scheduleStartTime": "2026-01-01T00:00:00Z"}
    out = coscheduling_status(status, 2, report(pending=2, first_attempt=T0))
    assert out["scheduleStartTime"] == "2026-01-01T00:00:00Z"


def test_merge_patch_sets_changes_and_removes_zeroed_fields() -> None:
    current = {"phase": "Running", "running": 2, "scheduled": 2}
    desired = {"phase": "Pending", "occupiedBy": "ns/a"}
    assert merge_patch(current, desired, COSCHEDULING_FIELDS) == {
        "phase": "Pending",
        "occupiedBy": "ns/a",
        "running": None,  # zero: omitempty, removed
    }  # "scheduled" is not ours: left alone
    assert merge_patch(desired, desired, COSCHEDULING_FIELDS) == {}


def test_the_waiting_event_names_the_latest_refusal_until_min_member_is_placed() -> None:
    r = report(pending=3, placed=1, reason="Unschedulable", message="0/4 nodes are available")
    assert waiting_message(4, r) == (
        "FailedScheduling",
        "1/4 members placed; Unschedulable: 0/4 nodes are available",
    )
    assert waiting_message(4, report(pending=4)) is None  # nothing refused yet
    assert waiting_message(1, r) is None  # placed enough


GANG = PodGroupSpec(key="ns/pg", api=W, min_member=3)


def cond(**fields: Any) -> dict[str, Any]:
    return {"type": "PodGroupScheduled", **fields}


def test_no_condition_before_any_attempt() -> None:
    assert workload_conditions([], GANG, None, 1, T0) is None
    assert workload_conditions([], GANG, report(pending=3), 1, T0) is None


def test_a_group_whose_members_finished_before_the_write_is_still_scheduled() -> None:
    """Members that finished left the pod watch uncounted (a DELETED event with the pod as
    it was): the report's sticky flag says the minimum was placed once."""
    gone = report(scheduled=True)
    assert gone.placed + gone.running + gone.succeeded == 0
    written = workload_conditions([], GANG, gone, 1, T0)
    assert written is not None and written[0]["status"] == "True"
    assert written[0]["reason"] == "Scheduled"


def test_unschedulable_then_scheduled() -> None:
    r = report(pending=3, reason="Unschedulable", message="0/8 nodes are available: ...")
    first = workload_conditions([], GANG, r, 1, T0)
    assert first == [
        cond(
            status="False",
            reason="Unschedulable",
            message="0/8 nodes are available: ...",
            observedGeneration=1,
            lastTransitionTime=rfc3339(T0),
        )
    ]
    assert workload_conditions(first, GANG, r, 1, T0 + 5) is None  # unchanged: no write
    done = report(placed=2, running=1, reason="Unschedulable", message="old")
    second = workload_conditions(first, GANG, done, 1, T0 + 60)
    assert second == [
        cond(
            status="True",
            reason="Scheduled",
            message="",
            observedGeneration=1,
            lastTransitionTime=rfc3339(T0 + 60),
        )
    ]


def test_a_new_message_keeps_the_transition_time() -> None:
    old = [cond(status="False", reason="Unschedulable", message="a", observedGeneration=1,
                lastTransitionTime="2026-12-01T00:00:00Z")]  # fmt: skip
    r = report(pending=3, reason="SchedulerError", message="boom")
    new = workload_conditions(old, GANG, r, 1, T0 + 60)
    assert new is not None
    assert new[0]["reason"] == "SchedulerError"
    assert new[0]["message"] == "boom"
    assert new[0]["lastTransitionTime"] == "2026-12-01T00:00:00Z"


def test_scheduled_never_regresses_and_other_conditions_stay() -> None:
    other = {"type": "DisruptionTarget", "status": "False", "reason": "x", "message": ""}
    done = [other, cond(status="True", reason="Scheduled", message="", observedGeneration=1,
                        lastTransitionTime="2026-12-01T00:00:00Z")]  # fmt: skip
    r = report(pending=3, reason="Unschedulable", message="members were deleted")
    assert workload_conditions(done, GANG, r, 1, T0) is None
    first = workload_conditions([other], GANG, report(placed=3), 2, T0)
    assert first is not None
    assert first[0] == other
    assert first[1]["observedGeneration"] == 2


@pytest.mark.parametrize(("placed", "status"), [(0, None), (1, "True")])
def test_the_basic_policy_is_scheduled_with_one_member(placed: int, status: str | None) -> None:
    basic = PodGroupSpec(key="ns/pg", api=W, min_member=1, gang=False)
    out = workload_conditions([], basic, report(placed=placed, pending=4), 1, T0)
    assert (out[0]["status"] if out else None) == status

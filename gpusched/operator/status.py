"""The status each PodGroup API gets from a GangReport: pure functions, no I/O.

scheduler-plugins' `scheduling.x-k8s.io/v1alpha1` PodGroup
----------------------------------------------------------
`coscheduling_status` is the state scheduler-plugins' PodGroup controller
(pkg/controllers/podgroup_controller.go) converges to, one reconcile after another:

* "" -> Pending; Pending -> Scheduling once the group has minMember pods (then
  `occupiedBy` is "<ns>/<owner>" of every ownerReference of a member, sorted, comma-joined);
* otherwise the counts `running`, `succeeded`, `failed` are refreshed and: fewer pods than
  minMember -> Pending; succeeded + running < minMember -> Scheduling, >= -> Running; any
  failed with failed + running + succeeded >= minMember -> Failed; succeeded >= minMember
  -> Finished. Finished and Failed are final (the controller stops reconciling).
* Unknown is in the API's enum but that controller never writes it; neither do we.

Its counts are of every pod carrying the label; ours are the daemon's (core/gangs.py):
members it watches plus those it saw finish. A restarted daemon has not seen the pods that
finished before (the pod watch lists no finished pods), so `succeeded` and `failed` never go
below what the object already says.

`scheduleStartTime`: today's controller only reads it (its 48-hour give-up); the
Coscheduling plugin used to set it when the first member was bound. We set it once, to the
first attempt of any member, and never move it.

Fields follow the Go type's omitempty: a zero count, an empty occupiedBy are left out (a
field that becomes zero is removed by the merge patch), as the controller's
client.MergeFrom patch does.

"Why it waits": this CRD's status has no conditions (and the API server prunes fields
the schema does not list), so the reason is a Warning Event `FailedScheduling` on the
PodGroup (`kubectl describe podgroup`), written when it changes (`waiting_event`).

Upstream `scheduling.k8s.io/v1alpha2` PodGroup
----------------------------------------------
`workload_conditions` sets the one condition kube-scheduler 1.36 writes
(pkg/scheduler/schedule_one_podgroup.go, submitPodGroupAlgorithmResult and
updatePodGroupCondition): type `PodGroupScheduled`; True with reason `Scheduled` and the
cycle's (empty) message once minCount members are placed (1 for the basic policy); False
with reason `Unschedulable` or `SchedulerError` and the failure's message; never back from
True to False; `observedGeneration` the object's generation; `lastTransitionTime` moved
only when the status flips (meta.SetStatusCondition). Other conditions are kept as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gpusched.framework.gangs import PodGroupSpec
from gpusched.model.pod import GangAPI
from gpusched.operator.board import GangReport

PENDING = "Pending"
SCHEDULING = "Scheduling"
RUNNING = "Running"
FINISHED = "Finished"
FAILED = "Failed"
FINAL = (FINISHED, FAILED)
# The status fields the operator owns on an x-k8s PodGroup; others are left alone.
COSCHEDULING_FIELDS = ("phase", "occupiedBy", "running", "succeeded", "failed", "scheduleStartTime")

CONDITION_SCHEDULED = "PodGroupScheduled"
REASON_SCHEDULED = "Scheduled"

# The event on an x-k8s PodGroup that says why it waits.
WAITING_EVENT_REASON = "FailedScheduling"


def rfc3339(unix: float) -> str:
    """metav1.Time's wire format (seconds, UTC)."""
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _omit_empty(status: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if v not in (0, "", None)}


def coscheduling_status(
    current: Mapping[str, Any], min_member: int, report: GangReport | None
) -> dict[str, Any]:
    """The owned fields of an x-k8s PodGroup's status (omitempty applied), from its
    current status, its minMember (>= 1) and the daemon's report (None: no member seen)."""
    r = report or GangReport(GangAPI.COSCHEDULING, "")
    status: dict[str, Any] = {f: current.get(f) for f in COSCHEDULING_FIELDS}
    phase = str(status.get("phase") or "")
    if phase in FINAL:
        return _omit_empty(status)
    succeeded = max(r.succeeded, _count(current.get("succeeded")))
    failed = max(r.failed, _count(current.get("failed")))
    running = r.running
    pods = r.pending + r.placed + running + succeeded + failed
    # The controller's successive reconciles, to their fixed point (at most "" -> Pending
    # -> Scheduling -> a phase from the counts -> the same).
    for _ in range(4):
        before = phase
        if phase == "":
            phase = PENDING
        elif phase == PENDING:
            if pods >= min_member:
                phase = SCHEDULING
                if r.owner:
                    status["occupiedBy"] = r.owner
        else:
            status["running"], status["succeeded"], status["failed"] = running, succeeded, failed
            if pods < min_member:
                phase = PENDING
            else:
                phase = SCHEDULING if succeeded + running < min_member else RUNNING
                if failed and failed + running + succeeded >= min_member:
                    phase = FAILED
                if succeeded >= min_member:
                    phase = FINISHED
        if phase == before or phase in FINAL:
            break
    status["phase"] = phase
    if not status.get("scheduleStartTime") and r.first_attempt:
        status["scheduleStartTime"] = rfc3339(r.first_attempt)
    return _omit_empty(status)


def merge_patch(
    current: Mapping[str, Any], desired: Mapping[str, Any], fields: Sequence[str]
) -> dict[str, Any]:
    """The JSON merge patch taking `current` to `desired` over `fields` ({} : no change;
    a field `desired` leaves out is removed with null)."""
    patch: dict[str, Any] = {}
    for f in fields:
        want = desired.get(f)
        have = current.get(f)
        if want is None:
            if have is not None:
                patch[f] = None
        elif want != have:
            patch[f] = want
    return patch


def waiting_message(min_member: int, report: GangReport | None) -> tuple[str, str] | None:
    """(reason, message) of the x-k8s PodGroup's FailedScheduling Event while members wait
    for a place and one was refused; None when there is nothing to say."""
    if report is None or not report.reason:
        return None
    assigned = report.placed + report.running + report.succeeded + report.failed
    if assigned >= min_member:
        return None
    return (
        WAITING_EVENT_REASON,
        f"{assigned}/{min_member} members placed; {report.reason}: {report.message}",
    )


def workload_conditions(
    conditions: Sequence[Mapping[str, Any]],
    group: PodGroupSpec,
    report: GangReport | None,
    generation: int,
    now: float,
) -> list[dict[str, Any]] | None:
    """The upstream PodGroup's status.conditions with PodGroupScheduled as kube-scheduler
    would set it now; None when nothing changes."""
    if report is None:
        return None
    need = group.min_member if group.gang else 1
    assigned = report.placed + report.running + report.succeeded + report.failed
    if report.scheduled or (assigned > 0 and assigned >= need):
        want: dict[str, Any] = {"status": "True", "reason": REASON_SCHEDULED, "message": ""}
    elif report.reason:
        want = {"status": "False", "reason": report.reason, "message": report.message}
    else:
        return None  # never attempted: kube-scheduler has written nothing yet
    out = [dict(c) for c in conditions]
    existing = next((c for c in out if c.get("type") == CONDITION_SCHEDULED), None)
    if existing is not None and existing.get("status") == "True" and want["status"] != "True":
        return None  # a scheduled group is not regressed by a later cycle's failure
    if existing is None:
        out.append(
            {
                "type": CONDITION_SCHEDULED,
                **want,
                "observedGeneration": generation,
                "lastTransitionTime": rfc3339(now),
            }
        )
        return out
    changed = False
    if existing.get("status") != want["status"]:
        existing["status"] = want["status"]
        existing["lastTransitionTime"] = rfc3339(now)
        changed = True
    for field, value in (
        ("reason", want["reason"]),
        ("message", want["message"]),
        ("observedGeneration", generation),
    ):
        if existing.get(field) != value:
            existing[field] = value
            changed = True
    return out if changed else None

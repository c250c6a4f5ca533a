"""Status: what every extension point returns, with kube-scheduler's codes.

The code tells the caller what happens next (mirrors
pkg/scheduler/framework/interface.go): Unschedulable may be resolved by preemption,
UnschedulableAndUnresolvable may not, Wait parks the pod at Permit, Skip tells the runtime
to skip the plugin's later points for this pod, Pending keeps the pod waiting for an
external event without counting as a failure.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Code(enum.IntEnum):
    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    WAIT = 4
    SKIP = 5
    PENDING = 6

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    Code.SUCCESS: "Success",
    Code.ERROR: "Error",
    Code.UNSCHEDULABLE: "Unschedulable",
    Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable",
    Code.WAIT: "Wait",
    Code.SKIP: "Skip",
    Code.PENDING: "Pending",
}

# The `plugin` of the Status that rejects a malformed pod (the runtime's PreFilter gate): no
# cluster event can fix such a pod, only an update of the pod itself (the queue's requeue
# hints read it).
INVALID_POD = "PodSpec"


class ClusterWriteError(Exception):
    """The `error` of a Status from a write to the cluster (PreBind, Bind). `final`: the pod
    no longer exists, or is already bound or was re-created (the API answered 404 or 409),
    so the attempt ends without a retry. `uncertain`: the write may have happened or not
    (a timeout, a reset connection, a 5xx): only reading the pod can tell, so the placement
    stays assumed until that read (or the watch) settles it."""

    final: bool = False
    uncertain: bool = False


def ends_attempt(status: Status) -> bool:
    """Whether a failed binding must not be retried (see ClusterWriteError.final)."""
    return isinstance(status.error, ClusterWriteError) and status.error.final


def outcome_unknown(status: Status) -> bool:
    """Whether a failed write may have landed after all (see ClusterWriteError.uncertain)."""
    return isinstance(status.error, ClusterWriteError) and status.error.uncertain


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""
    error: BaseException | None = field(default=None, compare=False)

    def is_success(self) -> bool:
        return self.code is Code.SUCCESS

    def is_skip(self) -> bool:
        return self.code is Code.SKIP

    def is_wait(self) -> bool:
        return self.code is Code.WAIT

    def is_rejected(self) -> bool:
        """Unschedulable, UnschedulableAndUnresolvable or Pending: the pod waits."""
        return self.code in (
            Code.UNSCHEDULABLE,
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            Code.PENDING,
        )

    def message(self) -> str:
        return ", ".join(self.reasons)

    def with_plugin(self, plugin: str) -> Status:
        if self.plugin == plugin:
            return self
        return Status(self.code, self.reasons, plugin, self.error)

    def __str__(self) -> str:
        who = f"{self.plugin}: " if self.plugin else ""
        return f"{who}{self.code.label}" + (f" ({self.message()})" if self.reasons else "")


SUCCESS = Status()


def success() -> Status:
    return SUCCESS


def unschedulable(*reasons: str, plugin: str = "") -> Status:
    return Status(Code.UNSCHEDULABLE, reasons, plugin)


def unresolvable(*reasons: str, plugin: str = "") -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons, plugin)


def error(reason: str, *, plugin: str = "", exc: BaseException | None = None) -> Status:
    return Status(Code.ERROR, (reason,), plugin, exc)


def wait(plugin: str = "") -> Status:
    return Status(Code.WAIT, (), plugin)


def skip(plugin: str = "") -> Status:
    return Status(Code.SKIP, (), plugin)

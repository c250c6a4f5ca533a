"""The board: what the daemon knows of each gang with a PodGroup object, for the operator.

The daemon's event loop publishes a `GangReport` per (api, key) whenever a member pod, an
attempt's outcome or the PodGroup changes (daemon/gang_status.py); the operator's thread
reads them. A lock guards the map; subscribers (the operator's wake-up) are called after
each publish, outside the lock, with the keys that changed, so the operator writes only
the PodGroups whose report moved and never polls.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpusched.model.pod import GangAPI

Index = tuple[GangAPI, str]  # (api, "namespace/name")
Subscriber = Callable[[frozenset[Index]], None]

# Why a member could not be placed: the reasons kube-scheduler gives a PodGroupScheduled
# condition (and a pod's PodScheduled condition).
UNSCHEDULABLE = "Unschedulable"
SCHEDULER_ERROR = "SchedulerError"


@dataclass(frozen=True, slots=True)
class GangReport:
    api: GangAPI
    key: str
    pending: int = 0  # live members not placed
    placed: int = 0  # assumed or bound, not yet Running
    running: int = 0
    succeeded: int = 0  # seen finishing by this process (core/gangs.py)
    failed: int = 0
    first_attempt: float = 0.0  # unix seconds of the first attempt of any member; 0: none
    owner: str = ""  # "ns/owner1,ns/owner2" of a member (scheduler-plugins' occupiedBy)
    reason: str = ""  # UNSCHEDULABLE / SCHEDULER_ERROR of the latest failed attempt; "" none
    message: str = ""  # that attempt's message (the pod's FailedScheduling text)

    @property
    def members(self) -> int:
        """Every pod of the group, live or finished (scheduler-plugins lists them all)."""
        return self.pending + self.placed + self.running + self.succeeded + self.failed


class GangBoard:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reports: dict[Index, GangReport] = {}
        self._subscribers: list[Subscriber] = []

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        """Call `fn(changed keys)` after each publish that changed something; returns the
        unsubscribe function. `fn` runs on the publisher's thread: it must only hand off."""
        with self._lock:
            self._subscribers.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._subscribers:
                    self._subscribers.remove(fn)

        return unsubscribe

    def publish(self, reports: Iterable[GangReport], removed: Iterable[Index] = ()) -> None:
        changed: set[Index] = set()
        with self._lock:
            for report in reports:
                index = (report.api, report.key)
                if self._reports.get(index) != report:
                    self._reports[index] = report
                    changed.add(index)
            for index in removed:
                if self._reports.pop(index, None) is not None:
                    changed.add(index)
            subscribers = list(self._subscribers) if changed else []
        keys = frozenset(changed)
        for fn in subscribers:
            fn(keys)

    def get(self, api: GangAPI, key: str) -> GangReport | None:
        with self._lock:
            return self._reports.get((api, key))

    def snapshot(self) -> dict[Index, GangReport]:
        with self._lock:
            return dict(self._reports)

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
from typing import Generic, TypeVar

from gpusched.model.pod import GangAPI

Index = tuple[GangAPI, str]  # (api, "namespace/name")
Subscriber = Callable[[frozenset[Index]], None]
K = TypeVar("K")
R = TypeVar("R")

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
    # minCount members (1 for the basic policy) were placed at once at some point, however
    # soon they finished: the pod watch selects unfinished pods, and the API server's
    # DELETED event for a pod that leaves it carries the pod as it was (Running), so a
    # member that finished cannot be told from one deleted and is in no count.
    scheduled: bool = False

    @property
    def members(self) -> int:
        """Every pod of the group, live or finished (scheduler-plugins lists them all)."""
        return self.pending + self.placed + self.running + self.succeeded + self.failed


class Board(Generic[K, R]):
    """Reports by key, published by the daemon's loop and read by the operator's thread: a
    lock guards the map; subscribers are called after each publish that changed something,
    outside the lock, with the keys whose report changed."""

    def __init__(self, key_of: Callable[[R], K]) -> None:
        self._key_of = key_of
        self._lock = threading.Lock()
        self._reports: dict[K, R] = {}
        self._subscribers: list[Callable[[frozenset[K]], None]] = []

    def subscribe(self, fn: Callable[[frozenset[K]], None]) -> Callable[[], None]:
        """Call `fn(changed keys)` after each publish that changed something; returns the
        unsubscribe function. `fn` runs on the publisher's thread: it must only hand off."""
        with self._lock:
            self._subscribers.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._subscribers:
                    self._subscribers.remove(fn)

        return unsubscribe

    def publish(self, reports: Iterable[R], removed: Iterable[K] = ()) -> None:
        changed: set[K] = set()
        with self._lock:
            for report in reports:
                key = self._key_of(report)
                if self._reports.get(key) != report:
                    self._reports[key] = report
                    changed.add(key)
            for key in removed:
                if self._reports.pop(key, None) is not None:
                    changed.add(key)
            subscribers = list(self._subscribers) if changed else []
        keys = frozenset(changed)
        for fn in subscribers:
            fn(keys)

    def report(self, key: K) -> R | None:
        with self._lock:
            return self._reports.get(key)

    def snapshot(self) -> dict[K, R]:
        with self._lock:
            return dict(self._reports)

    def keys(self) -> frozenset[K]:
        with self._lock:
            return frozenset(self._reports)


class GangBoard(Board[Index, GangReport]):
    def __init__(self) -> None:
        super().__init__(lambda r: (r.api, r.key))

    def get(self, api: GangAPI, key: str) -> GangReport | None:
        return self.report((api, key))

"""The quota board: what the daemon knows of each ElasticQuota object, for the operator.

The daemon's event loop publishes a `QuotaReport` per ElasticQuota ("namespace/name")
whenever its tenant's usage, the quota objects, a Namespace's tenant or the cluster's
capacity change (daemon/quota_status.py); the operator's thread reads them. As the
GangBoard (board.py): a lock guards the map, and subscribers are called after each publish,
outside the lock, with the keys whose report changed, so nothing polls.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

QuotaSubscriber = Callable[[frozenset[str]], None]

# Warning Events on an ElasticQuota (reason, message pairs of QuotaReport.warnings).
MINIMUMS_EXCEED_CLUSTER = "MinimumsExceedCluster"
INVALID_QUOTA = "InvalidQuota"


@dataclass(frozen=True, slots=True)
class QuotaReport:
    key: str  # "namespace/name"
    tenant: str
    # status.used: the tenant's usage over the resources the object's min or max names,
    # plus nvidia.com/gpu, as quantity strings (model/quota.py render).
    used: Mapping[str, str] = field(default_factory=dict)
    # (reason, message) of each Warning Event the object should carry now.
    warnings: tuple[tuple[str, str], ...] = ()


class QuotaBoard:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reports: dict[str, QuotaReport] = {}
        self._subscribers: list[QuotaSubscriber] = []

    def subscribe(self, fn: QuotaSubscriber) -> Callable[[], None]:
        """Call `fn(changed keys)` after each publish that changed something; returns the
        unsubscribe function. `fn` runs on the publisher's thread: it must only hand off."""
        with self._lock:
            self._subscribers.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._subscribers:
                    self._subscribers.remove(fn)

        return unsubscribe

    def publish(self, reports: Iterable[QuotaReport], removed: Iterable[str] = ()) -> None:
        changed: set[str] = set()
        with self._lock:
            for report in reports:
                if self._reports.get(report.key) != report:
                    self._reports[report.key] = report
                    changed.add(report.key)
            for key in removed:
                if self._reports.pop(key, None) is not None:
                    changed.add(key)
            subscribers = list(self._subscribers) if changed else []
        keys = frozenset(changed)
        for fn in subscribers:
            fn(keys)

    def get(self, key: str) -> QuotaReport | None:
        with self._lock:
            return self._reports.get(key)

    def keys(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._reports)

"""What the daemon publishes on the GangBoard (operator/board.py) for the PodGroup status
operator: per PodGroup (either API), its members pending / placed / running / succeeded /
failed (core/gangs.py's GangIndex and the cache), the first attempt of any member, the
owner of a member, and the latest reason a member could not be placed (the Reporter sees
every attempt's outcome).

Everything here runs on the daemon's event loop: a change marks its gang dirty, and one
callback per loop turn recomputes the dirty gangs and publishes them, so a burst of pod
events costs one report per gang.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gpusched.core.handle import SchedulerHandle
from gpusched.daemon.coalesce import CoalescedFlush
from gpusched.model.pod import GangAPI, PodInfo
from gpusched.operator.board import GangBoard, GangReport, Index


class GangStatusPublisher(CoalescedFlush):
    def __init__(
        self,
        board: GangBoard,
        handle: SchedulerHandle,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.board = board
        self.handle = handle
        self.clock = clock  # wall clock: scheduleStartTime is a timestamp
        self._dirty: set[Index] = set()
        self._removed: set[Index] = set()
        # (api, key) -> (first attempt, latest failure reason, its message)
        self._attempts: dict[Index, tuple[float, str, str]] = {}
        # Groups whose minimum was placed at once (sticky: GangReport.scheduled).
        self._scheduled: set[Index] = set()

    def touch(self, api: GangAPI, key: str) -> None:
        """Something about the gang changed: republish it (at the end of this loop turn)."""
        if api is GangAPI.ANNOTATIONS:
            return  # no object to report on
        index = (api, key)
        self._removed.discard(index)
        self._dirty.add(index)
        self._schedule()

    def attempted(self, pod: PodInfo, reason: str, message: str) -> None:
        """A member's attempt ended: `reason` "" (placed or bound), Unschedulable or
        SchedulerError with the message its FailedScheduling Event carries."""
        gang = pod.gang
        if gang is None or gang.api is GangAPI.ANNOTATIONS:
            return
        index = (gang.api, gang.name)
        first, old_reason, old_message = self._attempts.get(index, (self.clock(), "", ""))
        if reason:
            old_reason, old_message = reason, message
        self._attempts[index] = (first, old_reason, old_message)
        self.touch(gang.api, gang.name)

    def forget(self, api: GangAPI, key: str) -> None:
        """The PodGroup object was deleted: its report goes too."""
        index = (api, key)
        self._attempts.pop(index, None)
        self._scheduled.discard(index)
        self._dirty.discard(index)
        self._removed.add(index)
        self._schedule()

    def flush(self) -> None:
        dirty, self._dirty = self._dirty, set()
        removed, self._removed = self._removed, set()
        self.board.publish([self.report(api, key) for api, key in dirty], removed)

    def report(self, api: GangAPI, key: str) -> GangReport:
        index = self.handle.gang_index
        pending = placed = running = 0
        owner = ""
        for pod in index.members(key):
            if pod.gang is None or pod.gang.api is not api:
                continue  # a namesake group of the other API
            if pod.phase == "Running":
                running += 1
            elif pod.node_name or self.handle.cache.get(pod.uid) is not None:
                placed += 1  # assumed (binding in flight or waiting at Permit) or bound
            else:
                pending += 1
            if not owner and pod.owners:
                owner = ",".join(f"{pod.namespace}/{name}" for name in pod.owners)
        gang = index.get(key)
        first, reason, message = self._attempts.get((api, key), (0.0, "", ""))
        succeeded = gang.succeeded if gang is not None else 0
        failed = gang.failed if gang is not None else 0
        spec = self.handle.gangs.pod_group(api, key) if api is not GangAPI.ANNOTATIONS else None
        if spec is not None:  # its minimum is known only from the object
            need = spec.min_member if spec.gang else 1
            assigned = placed + running + succeeded + failed
            if assigned > 0 and assigned >= need:
                self._scheduled.add((api, key))
        return GangReport(
            api=api,
            key=key,
            pending=pending,
            placed=placed,
            running=running,
            succeeded=succeeded,
            failed=failed,
            first_attempt=first,
            owner=owner,
            reason=reason,
            message=message,
            scheduled=(api, key) in self._scheduled,
        )

"""Pods parked at Permit: a gang member waits here until its gang is complete.

A WaitingPod resolves once every plugin that said Wait allows it, or as soon as one rejects
it, or when the earliest plugin timeout passes (kube-scheduler's waitingPod semantics).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

from gpusched.framework.status import Code, Status
from gpusched.model.pod import PodInfo


class WaitingPod:
    def __init__(self, pod: PodInfo, node: str, timeouts: dict[str, float], now: float) -> None:
        self.pod = pod
        self.node = node
        self.pending = set(timeouts)
        self.deadline = now + min(timeouts.values()) if timeouts else now
        self._timeout_plugin = min(timeouts, key=lambda k: timeouts[k]) if timeouts else ""
        self._result: Status | None = None
        self._future: asyncio.Future[Status] | None = None
        self._callbacks: list[Callable[[], None]] = []

    @property
    def done(self) -> bool:
        return self._result is not None

    def allow(self, plugin: str) -> None:
        self.pending.discard(plugin)
        if not self.pending:
            self._resolve(Status())

    def reject(self, plugin: str, message: str) -> None:
        self._resolve(Status(Code.UNSCHEDULABLE, (message,), plugin))

    def check_timeout(self, now: float) -> bool:
        """Resolve as timed out if the deadline passed (the simulator's virtual clock)."""
        if not self.done and now >= self.deadline:
            self._resolve(self._timeout_status())
            return True
        return False

    def _timeout_status(self) -> Status:
        return Status(
            Code.UNSCHEDULABLE,
            (f"rejected due to timeout after waiting at permit ({self._timeout_plugin})",),
            self._timeout_plugin,
        )

    def _resolve(self, status: Status) -> None:
        if self._result is not None:
            return
        self._result = status
        if self._future is not None and not self._future.done():
            self._future.set_result(status)
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_resolve(self, callback: Callable[[], None]) -> None:
        """Call `callback` once the pod is allowed, rejected or timed out (at once if it
        is). The simulator resumes the binding cycle from it; the daemon awaits `wait`."""
        if self._result is not None:
            callback()
        else:
            self._callbacks.append(callback)

    def result(self) -> Status | None:
        return self._result

    async def wait(self, now: float) -> Status:
        """Block the binding cycle until allowed, rejected or timed out."""
        if self._result is not None:
            return self._result
        loop = asyncio.get_running_loop()
        self._future = loop.create_future()
        try:
            return await asyncio.wait_for(
                asyncio.shield(self._future), max(0.0, self.deadline - now)
            )
        except TimeoutError:
            status = self._timeout_status()
            self._resolve(status)
            return status


class WaitingPods:
    def __init__(self) -> None:
        self._pods: dict[str, WaitingPod] = {}

    def add(self, wp: WaitingPod) -> None:
        self._pods[wp.pod.uid] = wp

    def get(self, uid: str) -> WaitingPod | None:
        return self._pods.get(uid)

    def remove(self, uid: str) -> None:
        self._pods.pop(uid, None)

    def __iter__(self) -> Iterator[WaitingPod]:
        return iter(list(self._pods.values()))

    def __len__(self) -> int:
        return len(self._pods)

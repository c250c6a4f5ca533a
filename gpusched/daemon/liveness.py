"""What /healthz checks: the watches and the scheduling loop make progress.

A liveness probe that always answers ok cannot restart a scheduler whose watch died
(the cache freezes, binds go to nodes that are full) or whose loop is wedged (pods wait
forever). `Liveness.problems` names each of them; the metrics server answers 500 with that
list (gpusched/observability/metrics.py), and the kubelet restarts the pod, which re-lists.

* a watch: each Reflector records when it last made progress (a list page, an event, a
  bookmark, a watch the server ended); one stuck longer than `watch_stall` is unhealthy;
* the loop: it beats after every attempt and says when it waits on the queue. Waiting on an
  empty queue is alive however long it lasts; a loop that has not beaten for `loop_stall`
  while pods are waiting for it (it is in an attempt, or the queue has active pods and it
  is not taking them) is wedged. A loop that is not running (a standby, or before the
  first sync) is not checked: the watches are.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol


class Watched(Protocol):
    """A Reflector, as far as liveness is concerned."""

    def problem(self, stall_seconds: float) -> str | None: ...


class Liveness:
    def __init__(
        self,
        watches: Sequence[Watched],
        pending: Callable[[], int],
        *,
        watch_stall: float,
        loop_stall: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.watches = watches
        self.pending = pending  # pods the loop could take now (the active queue)
        self.watch_stall = watch_stall
        self.loop_stall = loop_stall
        self.clock = clock
        self.loop_running = False
        self.waiting = False  # the loop waits on the queue
        self.beat_at = clock()

    def loop_waiting(self) -> None:
        """The loop is about to wait on the queue."""
        self.loop_running = True
        self.waiting = True
        self.beat_at = self.clock()

    def loop_beat(self) -> None:
        """The loop took a pod (or finished an attempt)."""
        self.loop_running = True
        self.waiting = False
        self.beat_at = self.clock()

    def loop_stopped(self) -> None:
        self.loop_running = False

    def problems(self) -> list[str]:
        out = [p for w in self.watches if (p := w.problem(self.watch_stall)) is not None]
        if self.loop_running:
            idle = self.clock() - self.beat_at
            pending = self.pending()
            if idle > self.loop_stall and (not self.waiting or pending > 0):
                doing = "waiting on the queue" if self.waiting else "in an attempt"
                out.append(
                    f"scheduling loop: no progress for {idle:.0f}s"
                    f" (limit {self.loop_stall:.0f}s), {doing} with {pending} pods active"
                )
        return out

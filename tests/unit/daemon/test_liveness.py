"""What /healthz checks: the watches' progress and the scheduling loop's heartbeat."""

from __future__ import annotations

from dataclasses import dataclass

from gpusched.daemon.liveness import Liveness
from tests.fakes import Clock


@dataclass
class Watch:
    stuck: str | None = None
    asked: float = 0.0

    def problem(self, stall_seconds: float) -> str | None:
        self.asked = stall_seconds
        return self.stuck


def _liveness(clock: Clock, pending: list[int], *watches: Watch) -> Liveness:
    return Liveness(list(watches), lambda: pending[0], watch_stall=180, loop_stall=60, clock=clock)


def test_a_stuck_watch_is_named() -> None:
    nodes, pods = Watch(), Watch(stuck="watch pods: no progress for 200s (limit 180s)")
    live = _liveness(Clock(), [0], nodes, pods)
    assert live.problems() == ["watch pods: no progress for 200s (limit 180s)"]
    assert nodes.asked == pods.asked == 180


def test_a_loop_waiting_on_an_empty_queue_is_alive_however_long() -> None:
    clock, pending = Clock(), [0]
    live = _liveness(clock, pending)
    live.loop_waiting()
    clock.t += 3600
    assert live.problems() == []


def test_a_loop_not_running_is_not_checked() -> None:
    # A standby (or a daemon not synced yet) has no loop; its watches are still checked.
    clock, pending = Clock(), [5]
    live = _liveness(clock, pending)
    clock.t += 3600
    assert live.problems() == []
    live.loop_beat()
    live.loop_stopped()
    clock.t += 3600
    assert live.problems() == []


def test_a_loop_stuck_in_an_attempt_is_wedged() -> None:
    clock, pending = Clock(), [3]
    live = _liveness(clock, pending)
    live.loop_beat()
    clock.t += 60
    assert live.problems() == []  # not more than the limit
    clock.t += 1
    assert live.problems() == [
        "scheduling loop: no progress for 61s (limit 60s), in an attempt with 3 pods active"
    ]
    live.loop_waiting()  # the attempt ended
    assert live.problems() == []


def test_a_loop_that_waits_while_pods_are_active_is_wedged() -> None:
    # The queue has pods to hand out but the loop never takes them.
    clock, pending = Clock(), [0]
    live = _liveness(clock, pending)
    live.loop_waiting()
    clock.t += 61
    assert live.problems() == []
    pending[0] = 2
    assert live.problems() == [
        "scheduling loop: no progress for 61s (limit 60s), waiting on the queue with 2 pods active"
    ]

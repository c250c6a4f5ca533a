"""How the daemon reports an attempt: the JSON decision record on stdout, kube-scheduler's
Events (`Scheduled`, `FailedScheduling`) and PodScheduled condition, and the metrics. The
ScheduleOne object calls it (its Observer port) once per attempt."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from gpusched.core.queue import QueuedPodInfo
from gpusched.core.runtime.framework import Framework
from gpusched.core.schedule_one import Decision, Observer, Outcome
from gpusched.daemon.tasks import Tasks
from gpusched.kube.writer import ClusterWriter, ObjectRef
from gpusched.model.pod import PodInfo
from gpusched.observability.explain_record import scheduled_message
from gpusched.observability.logging import decision_record
from gpusched.observability.metrics import Metrics

Logger = structlog.typing.FilteringBoundLogger

# The attempts metric's `result` label (kube-scheduler's: scheduled, unschedulable, error).
_METRIC_RESULT = {Outcome.BOUND: "scheduled", Outcome.UNSCHEDULABLE: "unschedulable"}
_BINDINGS = {Outcome.BOUND: "bound", Outcome.DROPPED: "dropped", Outcome.BIND_FAILED: "failed"}


class Reporter(Observer):
    def __init__(
        self,
        log: Logger,
        metrics: Metrics,
        writer: ClusterWriter,
        tasks: Tasks,
        frameworks: Mapping[str, Framework],
        names: Callable[[], list[str]],
        on_attempt: Callable[[PodInfo, str, str], None] | None = None,
        telemetry: Callable[[str], dict[str, Any] | None] | None = None,
    ) -> None:
        self.log = log
        self.metrics = metrics
        self.writer = writer
        self.tasks = tasks
        self.frameworks = frameworks
        self.names = names
        # Every attempt's end as (pod, reason, message): reason "" when placed, else the
        # PodScheduled reason (Unschedulable, SchedulerError). The PodGroup status board.
        self.on_attempt = on_attempt
        # pod uid -> the chosen node's telemetry when the attempt read it (state, hottest
        # card's temperature), for the decision record; None without telemetry.
        self.telemetry = telemetry
        self._timings: dict[str, tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]] = {}
        # The plugin histogram's children by (plugin, point): labels() takes a lock and
        # builds its key at every call, for every plugin of every attempt.
        self._plugin_children: dict[tuple[str, str], Any] = {}

    def finished(
        self,
        info: QueuedPodInfo,
        decision: Decision,
        outcome: Outcome,
        message: str | None,
        bind_us: Mapping[str, float] | None,
    ) -> None:
        pod = decision.pod
        profile = pod.scheduler_name
        if message is None:
            message = decision.message
        self._observe_plugins(profile)
        if outcome in _BINDINGS:
            self.metrics.bindings.labels(_BINDINGS[outcome]).inc()
        if bind_us is not None and outcome is Outcome.UNSCHEDULABLE:
            self.metrics.bindings.labels("failed").inc()  # rejected at Permit or PreBind
        result = _METRIC_RESULT.get(outcome, "error")
        seconds = time.perf_counter() - decision.started
        self.metrics.attempts.labels(result, profile).inc()
        self.metrics.attempt_duration.labels(result, profile).observe(seconds)
        record = decision_record(
            decision,
            names=self.names(),
            profile=profile,
            attempt=info.attempts,
            result=outcome.value,
            message=message,
            extra_us=bind_us,
        )
        # The configuration generation the attempt was scheduled with (daemon/reload.py).
        fw = decision.framework or self.frameworks.get(profile)
        record["config_generation"] = fw.generation if fw is not None else None
        if self.telemetry is not None and (seen := self.telemetry(pod.uid)) is not None:
            record["telemetry"] = seen
        if outcome in (Outcome.BOUND, Outcome.DROPPED):
            self.log.info("decision", **record)
        else:
            self.log.warning("decision", **record)
        if self.on_attempt is not None and outcome is not Outcome.DROPPED:
            reason = "" if outcome is Outcome.BOUND else _reason(outcome)
            self.on_attempt(pod, reason, message if reason else "")
        if outcome is Outcome.BOUND:
            self.tasks.spawn(
                self.writer.event(
                    ObjectRef.pod(pod),
                    "Normal",
                    "Scheduled",
                    scheduled_message(pod.key, decision.node, record, _settled(message, record)),
                    action="Binding",
                ),
                f"event {pod.key}",
            )
        elif outcome is not Outcome.DROPPED:
            self.failed(pod, message, _reason(outcome))

    def raised(self, info: QueuedPodInfo, exc: Exception) -> None:
        self.log.error("scheduling attempt raised", pod=info.pod.key, exc_info=exc)
        message = f"scheduler error: {exc!r}"
        if self.on_attempt is not None:
            self.on_attempt(info.pod, "SchedulerError", message)
        self.failed(info.pod, message, "SchedulerError")

    def failed(self, pod: PodInfo, message: str, reason: str) -> None:
        """The FailedScheduling Event and the PodScheduled=False condition."""

        async def write() -> None:
            await self.writer.event(ObjectRef.pod(pod), "Warning", "FailedScheduling", message)
            await self.writer.pod_condition(pod, reason, message)

        self.tasks.spawn(write(), f"report {pod.key}")

    def _observe_plugins(self, profile: str) -> None:
        """Per-plugin durations since the last report into the plugin histogram."""
        timings = self.frameworks[profile].timings
        prev_ns, prev_calls = self._timings.get(profile, ({}, {}))
        # Each property builds a dict: read once per report, not once per key (that was
        # quadratic in the plugin count, 3 % of the daemon's CPU under a backlog).
        all_ns, all_calls = timings.ns, timings.calls
        for key, ns in all_ns.items():
            calls = all_calls[key] - prev_calls.get(key, 0)
            if calls > 0:
                per_call = (ns - prev_ns.get(key, 0)) / calls / 1e9
                child = self._plugin_children.get(key)
                if child is None:
                    child = self.metrics.plugin_duration.labels(key[1], key[0], "Success")
                    self._plugin_children[key] = child
                child.observe(per_call)
        self._timings[profile] = (all_ns, all_calls)


def _settled(message: str, record: Mapping[str, Any]) -> str:
    """What the bound message says beyond "bound to NODE (cards ...)": how a Binding of
    unknown outcome was settled (core/schedule_one.py), or nothing."""
    rest = message.removeprefix(f"bound to {record.get('node') or ''}")
    if record.get("cards"):
        rest = rest.removeprefix(f" (cards {','.join(map(str, record['cards']))})")
    return rest.strip().removeprefix("(").removesuffix(")")


def _reason(outcome: Outcome) -> str:
    """The PodScheduled=False reason of a failed attempt."""
    return "Unschedulable" if outcome is Outcome.UNSCHEDULABLE else "SchedulerError"

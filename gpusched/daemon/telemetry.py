"""The daemon's telemetry task: every `telemetry.intervalSeconds`, read the DCGM metrics
from Prometheus (telemetry/prometheus.py) and apply them to the snapshot
(telemetry/ingest.py), then report what changed.

The apply runs on the event loop between scheduling attempts and never awaits, so an
attempt never sees half a refresh (the same atomicity as the watches' cache updates).
Standbys run it too: the snapshot a new leader schedules from is already current.

Reported:
- each node's telemetry state change, once (`telemetry fresh|stale|missing`; stale and
  missing are warnings), at most MAX_NODE_LINES lines a refresh plus one summary line, so
  a Prometheus outage in a large cluster is a few lines, not one per node;
- each card health change: a log line and, from the leader only, a `GPUUnhealthy`
  Warning or `GPUHealthy` Normal Event on the Node (a standby keeps the cards that fell
  sick and writes them once it leads, as it does the daemon's other node warnings);
- each distinct query problem once (and once when all are gone), Prometheus' warnings
  once each;
- the metrics (observability/metrics.py): nodes per state, refresh time, errors by reason,
  unmatched readings, unhealthy cards.

Pods the Thermal filter rejected are retried when a node cooled or lost its fresh data
(ClusterEvent.TELEMETRY); pods waiting for a card are retried when a card healed.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import structlog

from gpusched.config.settings import Telemetry
from gpusched.core.cache.snapshot import Snapshot
from gpusched.core.queue import ClusterEvent, SchedulingQueue
from gpusched.core.queue.hints import NodeChange
from gpusched.observability.metrics import Metrics
from gpusched.telemetry.ingest import HealthChange, IngestReport, NodeState, TelemetryIngest
from gpusched.telemetry.prometheus import Problem, PrometheusReader, ReadResult

Logger = structlog.typing.FilteringBoundLogger

MAX_NODE_LINES = 50  # node state lines per refresh before the rest are summed up
MAX_PROBLEMS = 256  # distinct problems remembered as reported (bounded: messages vary)
MAX_NOTED = 4096  # placements whose node telemetry awaits their decision record
GPU_UNHEALTHY = "GPUUnhealthy"
GPU_HEALTHY = "GPUHealthy"

# (node, type, reason, message): an Event on a Node, written by the daemon's writer.
NodeEvent = Callable[[str, str, str, str], None]


class TelemetryTask:
    def __init__(
        self,
        settings: Telemetry,
        snapshot: Snapshot,
        queue: SchedulingQueue,
        metrics: Metrics,
        log: Logger,
        *,
        node_event: NodeEvent,
        leading: Callable[[], bool],
        reader: PrometheusReader | None = None,
        wall: Callable[[], float] = time.time,
        on_applied: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self.snapshot = snapshot
        self.queue = queue
        self.metrics = metrics
        self.log = log.bind(component="telemetry")
        self.node_event = node_event
        self.leading = leading
        self.wall = wall
        self.reader = reader or PrometheusReader(settings, clock=wall)
        # Called right after each ingestion pass, before the next attempt: plugins that
        # keep state over the readings (Thermal's red-line latch) judge every sample.
        self.on_applied = on_applied
        # Set (and replaced) at the end of every refresh: tests and tools wait on it.
        self._refreshed = asyncio.Event()
        self.ingest = TelemetryIngest(snapshot, settings)
        self.states: dict[str, NodeState] = {}
        self.refreshes = 0
        self._problems: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._warnings: OrderedDict[str, None] = OrderedDict()
        # Cards that fell sick while we were a standby: their Warning is written once we
        # lead (the latest change per card; a card that healed meanwhile is dropped).
        self._unwritten: dict[tuple[str, int], HealthChange] = {}
        self._noted: OrderedDict[str, dict[str, Any]] = OrderedDict()

    async def run(self) -> None:
        """Refresh every intervalSeconds until cancelled; a refresh that raises is logged
        and the next one tried (telemetry must never stop the scheduler)."""
        self.log.info(
            "telemetry reader started",
            prometheus=self.settings.prometheus_url,
            interval_seconds=self.settings.interval_seconds,
            stale_after_seconds=self.settings.stale_after_seconds,
            queries=sorted(self.reader.queries),
        )
        try:
            while True:
                started = time.monotonic()
                try:
                    await self.refresh()
                except Exception:
                    self.log.exception("telemetry refresh raised")
                pause = self.settings.interval_seconds - (time.monotonic() - started)
                await asyncio.sleep(max(0.0, pause))
        finally:
            await self.reader.close()

    async def refresh(self) -> IngestReport:
        """One read and apply; returns what the ingestion reported."""
        t0 = time.perf_counter()
        result = await self.reader.read()
        # From here to the end: no await, so no attempt sees half of it.
        before = self.snapshot.node_temp.copy()
        report = self.ingest.apply(result.readings, self.wall())
        self.refreshes += 1
        if self.on_applied is not None:
            self.on_applied()
        self._report_problems(result)
        self._report_states(report)
        self._report_health(report)
        self._requeue(before, report)
        m = self.metrics
        for state in NodeState:
            m.telemetry_nodes.labels(state.value).set(report.states.get(state, 0))
        m.telemetry_unmatched.set(report.unmatched + result.unlabelled)
        m.unhealthy_cards.set(int(np.count_nonzero(self.snapshot.card_sick)))
        m.telemetry_refresh.observe(time.perf_counter() - t0)
        done, self._refreshed = self._refreshed, asyncio.Event()
        done.set()
        return report

    async def next_refresh(self) -> None:
        """Until the refresh after this call has been applied and reported."""
        await self._refreshed.wait()

    # -- what changed ------------------------------------------------------------------------

    def _report_problems(self, result: ReadResult) -> None:
        # One failure usually fails every query alike (Prometheus down): one line for all.
        grouped: dict[tuple[str, str], list[str]] = {}
        for problem in result.problems:
            self.metrics.telemetry_errors.labels(problem.reason).inc()
            grouped.setdefault((problem.reason, problem.message), []).append(problem.query)
        for (reason, message), queries in grouped.items():
            key = (reason, message)
            if key in self._problems:
                self._problems.move_to_end(key)
                continue
            self._problems[key] = None
            while len(self._problems) > MAX_PROBLEMS:
                self._problems.popitem(last=False)
            self.log.warning(
                "telemetry query failed",
                queries=queries,
                reason=reason,
                error=message,
                prometheus=self.settings.prometheus_url,
            )
        if not result.problems and self._problems:
            self._problems.clear()
            self.log.info("telemetry queries answer again", prometheus=self.settings.prometheus_url)
        for warning in result.warnings:
            if warning not in self._warnings:
                self._warnings[warning] = None
                while len(self._warnings) > MAX_PROBLEMS:
                    self._warnings.popitem(last=False)
                self.log.warning("prometheus warning", warning=warning)

    def _report_states(self, report: IngestReport) -> None:
        snap = self.snapshot
        shown = 0
        rest: dict[str, int] = {}
        # A node's change from a known state first: the first states of a refresh that
        # meets a thousand nodes are what the summary line is for, a node going stale is not.
        for change in sorted(report.changes, key=lambda c: c.before is None):
            self.states[change.node] = change.after
            if shown >= MAX_NODE_LINES:
                rest[change.after.value] = rest.get(change.after.value, 0) + 1
                continue
            shown += 1
            row = snap.row_of(change.node)
            fields: dict[str, Any] = {
                "node": change.node,
                "before": change.before.value if change.before else None,
            }
            if change.after is NodeState.FRESH:
                fields["hottest_celsius"] = _num(snap.node_temp[row]) if row >= 0 else None
                self.log.info("telemetry fresh", **fields)
                continue
            if change.after is NodeState.STALE and row >= 0:
                last = float(np.nanmax(snap.card_sampled_at[row])) if row >= 0 else math.nan
                fields["last_sample_seconds_ago"] = round(self.wall() - last, 1)
                fields["detail"] = (
                    f"no card reading newer than {self.settings.stale_after_seconds:g} s:"
                    " scored neutral (never as cold)"
                )
            else:
                fields["detail"] = "no reading for any card yet: scored neutral (never as cold)"
            self.log.warning(f"telemetry {change.after.value}", **fields)
        if rest:
            self.log.warning(
                "telemetry state changes not listed", nodes=sum(rest.values()), states=rest
            )
        live = set(snap.rows)
        for gone in [n for n in self.states if n not in live]:
            del self.states[gone]

    def _report_health(self, report: IngestReport) -> None:
        for change in report.health:
            fields = {"node": change.node, "card": change.card, "uuid": change.uuid}
            if change.healthy:
                self.log.info("GPU healthy again", reason=change.reason, **fields)
            else:
                self.log.warning("GPU unhealthy", reason=change.reason, **fields)
            key = (change.node, change.card)
            if self.leading():
                self._write(change)
            elif change.healthy:
                self._unwritten.pop(key, None)
            else:
                self._unwritten[key] = change

    def now_leading(self) -> None:
        """Write the Warnings of cards that fell sick while we were a standby."""
        for change in self._unwritten.values():
            self._write(change)
        self._unwritten.clear()

    def _write(self, change: HealthChange) -> None:
        card = f"GPU {change.card}" + (f" ({change.uuid})" if change.uuid else "")
        if change.healthy:
            self.node_event(
                change.node, "Normal", GPU_HEALTHY, f"{card} back in service: {change.reason}"
            )
        else:
            self.node_event(
                change.node,
                "Warning",
                GPU_UNHEALTHY,
                f"{card} taken out of service by telemetry: {change.reason}",
            )

    def _requeue(self, before: np.ndarray[Any, Any], report: IngestReport) -> None:
        after = self.snapshot.node_temp
        n = min(len(before), len(after))
        was, now = before[:n], after[:n]
        # A node that cooled, or whose readings went stale (neutral again), may now pass
        # the Thermal filter; a warming node never helps.
        with np.errstate(invalid="ignore"):
            helped = (now < was) | (np.isnan(now) & ~np.isnan(was))
        if helped.any():
            self.queue.move_all(ClusterEvent.TELEMETRY)
        if any(change.healthy for change in report.health):
            self.queue.move_all(ClusterEvent.NODE_UPDATE, change=NodeChange.CARDS)

    # -- the decision record -----------------------------------------------------------------

    def note(self, uid: str, node: str) -> None:
        """At the attempt that chose `node`: its telemetry as the plugins read it, for the
        pod's decision record (`taken`)."""
        row = self.snapshot.row_of(node)
        if row < 0:
            return
        state = self.states.get(node)
        self._noted[uid] = {
            "state": state.value if state else NodeState.MISSING.value,
            "tempC": _num(self.snapshot.node_temp[row]),
        }
        self._noted.move_to_end(uid)
        while len(self._noted) > MAX_NOTED:
            self._noted.popitem(last=False)

    def taken(self, uid: str) -> dict[str, Any] | None:
        return self._noted.pop(uid, None)


def _num(value: float) -> float | None:
    v = float(value)
    return None if math.isnan(v) else round(v, 1)


__all__ = ["GPU_HEALTHY", "GPU_UNHEALTHY", "Problem", "TelemetryTask"]

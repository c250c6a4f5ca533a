"""Prometheus metrics with kube-scheduler's names where the meaning is the same, plus the
aiohttp server for /healthz, /readyz and /metrics.

Each daemon owns a CollectorRegistry (not the global one) so tests can start several
daemons in one process without duplicate-registration errors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# kube-scheduler's buckets for attempt durations (exponential from 1 ms).
_ATTEMPT_BUCKETS = tuple(0.001 * 2**i for i in range(15))
_PLUGIN_BUCKETS = tuple(0.00001 * 1.5**i for i in range(20))


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.attempts = Counter(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result.",
            ["result", "profile"],
            registry=r,
        )
        self.attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding).",
            ["result", "profile"],
            buckets=_ATTEMPT_BUCKETS,
            registry=r,
        )
        self.pending = Gauge(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type.",
            ["queue"],
            registry=r,
        )
        self.plugin_duration = Histogram(
            "scheduler_plugin_execution_duration_seconds",
            "Duration for running a plugin at a specific extension point.",
            ["plugin", "extension_point", "status"],
            buckets=_PLUGIN_BUCKETS,
            registry=r,
        )
        self.watch_events = Counter(
            "gpusched_watch_events",
            "Watch events decoded, by resource.",
            ["resource"],
            registry=r,
        )
        self.bindings = Counter(
            "gpusched_bindings",
            "Binding cycles, by the result (bound, dropped, failed).",
            ["result"],
            registry=r,
        )
        self.leader = Gauge(
            "gpusched_leader",
            "1 while this instance schedules (holds the leader Lease, or runs without leader"
            " election), else 0.",
            registry=r,
        )

        # The device-plugin over-commit detector (core/overcommit.py): nodes where other
        # schedulers' nvidia.com/gpu plus gpusched's cards exceed the allocatable count.
        self.overcommitted_nodes = Gauge(
            "gpusched_gpu_overcommitted_nodes",
            "Nodes whose nvidia.com/gpu requests by other schedulers' pods plus the cards"
            " gpusched's pods hold (whole, and shared by annotation) exceed the node's"
            " allocatable nvidia.com/gpu.",
            registry=r,
        )
        self.overcommitted_cards = Gauge(
            "gpusched_gpu_overcommitted_cards",
            "Cards in use beyond the node's allocatable nvidia.com/gpu, by node; a node's"
            " series exists only while it is over-committed.",
            ["node"],
            registry=r,
        )

        # Configuration hot reload (daemon/reload.py): the generation in use (1 at start, +1
        # per applied reload; decision records name it too) and every new file judged.
        self.config_generation = Gauge(
            "gpusched_config_generation",
            "Generation of the scheduler configuration in use: 1 at start, +1 per reload applied.",
            registry=r,
        )
        self.config_reloads = Counter(
            "gpusched_config_reloads",
            "Changed configuration files read, by the result: applied, unchanged (same"
            " effective configuration), invalid, needs_restart (both refused: the running"
            " configuration stays).",
            ["result"],
            registry=r,
        )
        # Live GPU telemetry read from Prometheus (gpusched/telemetry, daemon/telemetry.py).
        self.telemetry_nodes = Gauge(
            "gpusched_telemetry_nodes",
            "GPU nodes by the state of their telemetry: fresh (a card's reading is at most"
            " staleAfterSeconds old), stale (readings seen, none fresh), missing (none ever).",
            ["state"],
            registry=r,
        )
        self.telemetry_refresh = Histogram(
            "gpusched_telemetry_refresh_seconds",
            "Time to read every telemetry query from Prometheus and apply the readings.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.telemetry_errors = Counter(
            "gpusched_telemetry_errors",
            "Failed telemetry queries (or refreshes), by the reason: connection, timeout,"
            " http, response, query, token, tls.",
            ["reason"],
            registry=r,
        )
        self.telemetry_unmatched = Gauge(
            "gpusched_telemetry_unmatched_readings",
            "Card readings of the last refresh that matched no node's card (by UUID, or host"
            " label and gpu index), plus series naming no card at all.",
            registry=r,
        )
        self.unhealthy_cards = Gauge(
            "gpusched_gpu_unhealthy_cards",
            "Cards telemetry took out of service (a hardware XID, memory over its"
            " temperature limit).",
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _always_healthy() -> list[str]:
    return []


async def serve(
    metrics: Metrics,
    port: int,
    ready: Callable[[], bool],
    problems: Callable[[], list[str]] = _always_healthy,
    host: str = "0.0.0.0",
    routes: Sequence[web.AbstractRouteDef] = (),
) -> web.AppRunner:
    """Start the health/metrics server; the caller cleans the runner up on exit.

    /healthz (liveness) answers 500 with one line per problem `problems()` names, else ok;
    /readyz (readiness) answers 503 until `ready()`. `routes`: more pages the daemon serves
    on the same port (the GPU map, daemon/gpu_map), defined above this layer."""

    async def healthz(_: web.Request) -> web.Response:
        found = problems()
        if found:
            return web.Response(
                status=500, text="unhealthy:\n" + "".join(f"- {p}\n" for p in found)
            )
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="informers not synced yet")

    async def metrics_handler(_: web.Request) -> web.Response:
        body = metrics.render()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_handler)
    app.add_routes(routes)
    # handler_cancellation: a handler whose client went away is cancelled (a long one, an
    # explain search, then stops instead of running on for nobody).
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner

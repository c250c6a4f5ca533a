"""The settings of a configuration: the daemon's knobs, typed and validated.

`SchedulerConfig` is the whole loaded document (its profiles are read by profiles.py); the
YAML keys are the camelCase of the field names (config/args.py), as in
KubeSchedulerConfiguration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpusched.config.defaults import (
    CLIENT_BURST,
    CLIENT_QPS,
    LEADER_ELECT,
    LEASE_DURATION_SECONDS,
    LEASE_NAME,
    LEASE_NAMESPACE,
    MAX_CARDS_PER_NODE,
    POD_INITIAL_BACKOFF_SECONDS,
    POD_MAX_BACKOFF_SECONDS,
    POD_MAX_IN_UNSCHEDULABLE_PODS_DURATION_SECONDS,
    RENEW_DEADLINE_SECONDS,
    RETRY_PERIOD_SECONDS,
)
from gpusched.config.profile import Profile
from gpusched.framework.snapshot import MAX_CARDS_LIMIT
from gpusched.model.node import TopologyKeys

__all__ = [
    "ClientConnection",
    "LeaderElection",
    "Liveness",
    "SchedulerConfig",
    "Telemetry",
    "TelemetryQueries",
    "Watch",
]


@dataclass(frozen=True)
class ClientConnection:
    """Rate limits of the scheduler's API client (kube-scheduler's clientConnection). The
    limits apply twice, to two separate buckets: the scheduling writes (bindings) and the
    reports (Events, PodScheduled conditions), as kube-scheduler's event client has its own
    limiter; a flood of reports never delays a Binding."""

    qps: float = CLIENT_QPS
    burst: int = CLIENT_BURST
    # TCP keepalive on every API connection: first probe after this many idle seconds,
    # 3 probes a third of it apart, so a vanished peer is dropped in about twice this
    # (client-go's dialer uses 30 s). Linux's default would wait 2 hours.
    tcp_keepalive_seconds: float = 30.0

    def validate(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if not self.qps > 0:
            out.append(("qps", "must be > 0"))
        if self.burst < 1:
            out.append(("burst", "must be >= 1"))
        if not self.tcp_keepalive_seconds >= 1:
            out.append(("tcpKeepaliveSeconds", "must be >= 1"))
        return out


@dataclass(frozen=True)
class Watch:
    """How the node and pod watches read the API server (gpusched/kube/watch.py).

    The server ends each watch after about `timeoutSeconds` and sends a bookmark about
    every minute, so a healthy stream is never silent for longer than that; a read that
    waits `readTimeoutSeconds` (a bit more) is a dead stream, a half-open connection, and
    is dropped and re-opened: the watch then misses nothing for long (kube-scheduler's
    informers rely on the same server timeout). Failures (410 Gone, a refused list or
    watch) retry after an exponential backoff with jitter from `initialBackoffSeconds`
    doubling to `maxBackoffSeconds`, back to the start after `backoffResetSeconds` without
    a failure: client-go's reflector numbers (800 ms, 30 s, 2 min)."""

    timeout_seconds: int = 60
    read_timeout_seconds: float = 90.0
    initial_backoff_seconds: float = 0.8
    max_backoff_seconds: float = 30.0
    backoff_reset_seconds: float = 120.0

    def validate(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if self.timeout_seconds < 1:
            out.append(("timeoutSeconds", "must be >= 1"))
        elif not self.read_timeout_seconds > self.timeout_seconds:
            # Else every quiet, healthy watch would time out on our side first.
            out.append(("readTimeoutSeconds", f"must be > timeoutSeconds ({self.timeout_seconds})"))
        if not self.initial_backoff_seconds > 0:
            out.append(("initialBackoffSeconds", "must be > 0"))
        elif self.max_backoff_seconds < self.initial_backoff_seconds:
            out.append(
                (
                    "maxBackoffSeconds",
                    f"must be >= initialBackoffSeconds ({self.initial_backoff_seconds})",
                )
            )
        if not self.backoff_reset_seconds > 0:
            out.append(("backoffResetSeconds", "must be > 0"))
        return out


@dataclass(frozen=True)
class Liveness:
    """When /healthz answers 500 (a liveness probe then restarts the scheduler, which
    re-lists everything): a watch that made no progress (a list, an event, a bookmark, a
    watch ended by the server) for `watchStallSeconds`, or a scheduling loop that has pods
    to schedule and has not finished an attempt for `loopStallSeconds`. A healthy watch
    progresses at least once per `watch.timeoutSeconds`, so the watch limit must be above
    `watch.readTimeoutSeconds`; 180 s lets a watch retry several times (backoff up to 30 s)
    before it counts as stuck."""

    watch_stall_seconds: float = 180.0
    loop_stall_seconds: float = 60.0

    def validate(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if not self.watch_stall_seconds > 0:
            out.append(("watchStallSeconds", "must be > 0"))
        if not self.loop_stall_seconds > 0:
            out.append(("loopStallSeconds", "must be > 0"))
        return out


@dataclass(frozen=True)
class LeaderElection:
    """Which replica schedules (kube-scheduler's leaderElection; gpusched/kube/lease.py)."""

    leader_elect: bool = LEADER_ELECT
    # An integer: the Lease stores whole seconds, and every candidate judges expiry by it.
    lease_duration_seconds: int = LEASE_DURATION_SECONDS
    renew_deadline_seconds: float = RENEW_DEADLINE_SECONDS
    retry_period_seconds: float = RETRY_PERIOD_SECONDS
    resource_name: str = LEASE_NAME
    resource_namespace: str = LEASE_NAMESPACE

    def validate(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for key, value in (
            ("leaseDurationSeconds", self.lease_duration_seconds),
            ("renewDeadlineSeconds", self.renew_deadline_seconds),
            ("retryPeriodSeconds", self.retry_period_seconds),
        ):
            if not value > 0:
                out.append((key, "must be > 0"))
        if out:
            return out
        # The leader must give up (renewDeadline) before a standby may take over
        # (leaseDuration), and must get several tries (retryPeriod) within the deadline.
        if not self.renew_deadline_seconds < self.lease_duration_seconds:
            out.append(
                (
                    "renewDeadlineSeconds",
                    f"must be < leaseDurationSeconds ({self.lease_duration_seconds})",
                )
            )
        if not self.retry_period_seconds < self.renew_deadline_seconds:
            out.append(
                (
                    "retryPeriodSeconds",
                    f"must be < renewDeadlineSeconds ({self.renew_deadline_seconds})",
                )
            )
        if len(self.resource_name) > 253 or not _DNS_SUBDOMAIN.match(self.resource_name):
            out.append(
                ("resourceName", "must be a DNS subdomain (lower-case alphanumerics, '-', '.')")
            )
        if not _DNS_LABEL.match(self.resource_namespace):
            out.append(
                (
                    "resourceNamespace",
                    "must be a namespace name (at most 63 lower-case alphanumerics or '-')",
                )
            )
        return out


# dcgm-exporter's hardware XIDs worth taking a card out of service for (NVIDIA's XID
# catalogue): 48 double-bit ECC, 63/64 row-remap or page-retirement events and failures,
# 74 NVLink error, 79 fallen off the bus, 92 high single-bit ECC rate, 94/95 contained and
# uncontained ECC errors. Application faults (13, 31, 43, 45: a kernel's bad access or a
# killed context) say nothing about the card and are not listed.
HARDWARE_XIDS = (48, 63, 64, 74, 79, 92, 94, 95)


@dataclass(frozen=True)
class TelemetryQueries:
    """The PromQL of each reading, one instant query per refresh. Plain metric names by
    default (dcgm-exporter's default counters); a cluster whose Prometheus holds several
    clusters' exporters narrows them here, e.g. `DCGM_FI_DEV_GPU_TEMP{cluster="a"}`. Each
    result series must keep the host, gpu and UUID labels (no aggregation). An empty
    query is not asked (that reading stays unknown)."""

    gpu_temp: str = "DCGM_FI_DEV_GPU_TEMP"
    memory_temp: str = "DCGM_FI_DEV_MEMORY_TEMP"
    power_usage: str = "DCGM_FI_DEV_POWER_USAGE"
    # Not among dcgm-exporter's default counters (DCGM field 160, in W): add it to the
    # exporter's counters CSV; without it the power limit is unknown (NaN).
    power_limit: str = "DCGM_FI_DEV_POWER_MGMT_LIMIT"
    gpu_util: str = "DCGM_FI_DEV_GPU_UTIL"
    fb_free: str = "DCGM_FI_DEV_FB_FREE"
    fb_used: str = "DCGM_FI_DEV_FB_USED"
    xid_errors: str = "DCGM_FI_DEV_XID_ERRORS"


@dataclass(frozen=True)
class Telemetry:
    """Live GPU telemetry (gpusched/telemetry): DCGM exporter metrics read through the
    Prometheus HTTP API into per-card snapshot columns. Off while `prometheusUrl` is empty:
    every node then reads "no data" (neutral), as without an exporter.

    Readings older than `staleAfterSeconds` (by their Prometheus sample time) are dropped:
    stale or missing data scores neutral and never reads as cold. The limit should cover a
    few scrape intervals plus `intervalSeconds`."""

    prometheus_url: str = ""
    interval_seconds: float = 15.0
    stale_after_seconds: float = 60.0
    query_timeout_seconds: float = 10.0
    # dcgm-exporter labels the host `Hostname` in released versions and `hostname` on its
    # main branch; the first label present names the node. A card whose UUID the node's
    # gpusched.io/gpu-inventory lists is matched by UUID first (a relabelled or pod-name
    # host label cannot then mislead).
    host_labels: tuple[str, ...] = ("Hostname", "hostname")
    gpu_label: str = "gpu"
    uuid_label: str = "UUID"
    queries: TelemetryQueries = field(default_factory=TelemetryQueries)
    # A card reporting one of these XIDs is unhealthy (filtered) until a fresh reading
    # reports another value (a GPU reset or a new exporter clears DCGM's last XID).
    unhealthy_xids: tuple[int, ...] = HARDWARE_XIDS
    # HBM throttles around 95 °C on A100/H100; a card at the limit is unhealthy until it
    # is `memoryTempMarginCelsius` below it (hysteresis: no flapping at the edge).
    memory_temp_limit_celsius: float = 95.0
    memory_temp_margin_celsius: float = 5.0
    # Optional credentials for a Prometheus behind authentication: a bearer token file (a
    # projected ServiceAccount token, re-read at every refresh) and a CA bundle for https.
    bearer_token_file: str = ""
    ca_file: str = ""

    def validate(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        url = self.prometheus_url
        if url and not url.startswith(("http://", "https://")):
            out.append(("prometheusUrl", f"must start with http:// or https://, got {url!r}"))
        if not self.interval_seconds > 0:
            out.append(("intervalSeconds", "must be > 0"))
        if not self.query_timeout_seconds > 0:
            out.append(("queryTimeoutSeconds", "must be > 0"))
        elif self.query_timeout_seconds > self.interval_seconds and self.interval_seconds > 0:
            out.append(
                ("queryTimeoutSeconds", f"must be <= intervalSeconds ({self.interval_seconds})")
            )
        if not self.stale_after_seconds > self.interval_seconds:
            # Else every reading would be stale before the next refresh replaced it.
            out.append(
                ("staleAfterSeconds", f"must be > intervalSeconds ({self.interval_seconds})")
            )
        if not self.host_labels:
            out.append(("hostLabels", "must name at least one label"))
        for i, key in enumerate((*self.host_labels, self.gpu_label, self.uuid_label)):
            if not _PROM_LABEL.match(key):
                where = (
                    f"hostLabels[{i}]"
                    if i < len(self.host_labels)
                    else ("gpuLabel" if key == self.gpu_label else "uuidLabel")
                )
                out.append((where, f"{key!r} is not a Prometheus label name"))
        for i, xid in enumerate(self.unhealthy_xids):
            if not 0 < xid < 2**31:
                out.append((f"unhealthyXids[{i}]", f"must be a positive XID, got {xid}"))
        if not 0 < self.memory_temp_limit_celsius < 150:
            out.append(("memoryTempLimitCelsius", "must be in (0, 150)"))
        if not 0 <= self.memory_temp_margin_celsius < self.memory_temp_limit_celsius:
            out.append(
                (
                    "memoryTempMarginCelsius",
                    f"must be in [0, memoryTempLimitCelsius ({self.memory_temp_limit_celsius}))",
                )
            )
        return out


_PROM_LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# A Kubernetes label key: optional DNS-subdomain prefix and "/", then a name of at most 63
# characters (alphanumerics, '-', '_', '.', starting and ending alphanumeric).
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _label_key_problem(key: str) -> str | None:
    prefix, sep, name = key.rpartition("/")
    if sep and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "is not a valid label key: the prefix must be a DNS subdomain"
    if not _LABEL_NAME.match(name):
        return (
            "is not a valid label key: the name must be 1-63 alphanumerics, '-', '_' or '.',"
            " starting and ending with an alphanumeric"
        )
    return None


@dataclass(frozen=True)
class SchedulerConfig:
    """A loaded configuration: profiles plus the daemon's settings, all validated."""

    profiles: tuple[Profile, ...] = ()
    client_connection: ClientConnection = field(default_factory=ClientConnection)
    leader_election: LeaderElection = field(default_factory=LeaderElection)
    watch: Watch = field(default_factory=Watch)
    liveness: Liveness = field(default_factory=Liveness)
    telemetry: Telemetry = field(default_factory=Telemetry)
    pod_initial_backoff_seconds: float = POD_INITIAL_BACKOFF_SECONDS
    pod_max_backoff_seconds: float = POD_MAX_BACKOFF_SECONDS
    pod_max_in_unschedulable_pods_duration_seconds: float = (
        POD_MAX_IN_UNSCHEDULABLE_PODS_DURATION_SECONDS
    )
    topology_keys: TopologyKeys = field(default_factory=TopologyKeys)
    max_cards_per_node: int = MAX_CARDS_PER_NODE
    # Orders nodes for the tie-break between equal top scores (core/runtime/tie_break.py).
    tie_break_seed: int = 0

    def validate(self) -> list[tuple[str, str]]:
        """The settings' cross-field rules (profiles are checked while they are built)."""
        out: list[tuple[str, str]] = []
        if not self.pod_initial_backoff_seconds > 0:
            out.append(("podInitialBackoffSeconds", "must be > 0"))
        if self.pod_max_backoff_seconds < self.pod_initial_backoff_seconds:
            out.append(
                (
                    "podMaxBackoffSeconds",
                    f"must be >= podInitialBackoffSeconds ({self.pod_initial_backoff_seconds})",
                )
            )
        if not self.pod_max_in_unschedulable_pods_duration_seconds > 0:
            out.append(("podMaxInUnschedulablePodsDurationSeconds", "must be > 0"))
        if not 1 <= self.max_cards_per_node <= MAX_CARDS_LIMIT:
            out.append(("maxCardsPerNode", f"must be between 1 and {MAX_CARDS_LIMIT}"))
        if not 0 <= self.tie_break_seed < 2**63:
            out.append(("tieBreakSeed", "must be between 0 and 2^63-1"))
        for tier in ("rack", "spine", "clique"):
            problem = _label_key_problem(getattr(self.topology_keys, tier))
            if problem:
                out.append((f"topologyKeys.{tier}", problem))
        if self.topology_keys.rack == self.topology_keys.spine:
            out.append(("topologyKeys.spine", "must differ from topologyKeys.rack"))
        if self.liveness.watch_stall_seconds <= self.watch.read_timeout_seconds:
            out.append(
                (
                    "liveness.watchStallSeconds",
                    f"must be > watch.readTimeoutSeconds ({self.watch.read_timeout_seconds})",
                )
            )
        return out

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.scheduler_name for p in self.profiles)

    def profile(self, name: str) -> Profile:
        for p in self.profiles:
            if p.scheduler_name == name:
                return p
        raise KeyError(f"no profile named {name!r} (profiles: {', '.join(self.names)})")

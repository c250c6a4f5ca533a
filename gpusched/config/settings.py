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

__all__ = ["ClientConnection", "LeaderElection", "Liveness", "SchedulerConfig", "Watch"]


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

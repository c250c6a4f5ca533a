"""The scheduler-wide settings: defaults, leader election, client, validation."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.config import (
    LeaderElection,
    config_from_dict,
    config_to_document,
)
from gpusched.config.settings import Liveness, Watch
from gpusched.framework.registry import Registry
from gpusched.model.node import TopologyKeys
from tests.builders import CONFIG_HEAD, config_load_error


def test_default_settings(registry: Registry) -> None:
    cfg = config_from_dict(CONFIG_HEAD, registry)
    assert cfg.client_connection.qps == 50
    assert cfg.client_connection.burst == 100
    assert cfg.pod_initial_backoff_seconds == 1
    assert cfg.pod_max_backoff_seconds == 10
    assert cfg.pod_max_in_unschedulable_pods_duration_seconds == 300
    assert cfg.topology_keys == TopologyKeys(
        "topology.gpusched.io/rack", "topology.gpusched.io/spine"
    )
    assert cfg.max_cards_per_node == 8
    assert cfg.client_connection.tcp_keepalive_seconds == 30
    # The server ends a watch after ~60 s, a dead stream is dropped after 90 s of silence;
    # client-go's reflector backoff (800 ms doubling to 30 s, reset after 2 quiet minutes).
    assert cfg.watch == Watch(
        timeout_seconds=60,
        read_timeout_seconds=90.0,
        initial_backoff_seconds=0.8,
        max_backoff_seconds=30.0,
        backoff_reset_seconds=120.0,
    )
    assert cfg.liveness == Liveness(watch_stall_seconds=180.0, loop_stall_seconds=60.0)
    # kube-scheduler's leaderElection defaults; the Lease next to its own in kube-system.
    assert cfg.leader_election == LeaderElection(
        leader_elect=True,
        lease_duration_seconds=15,
        renew_deadline_seconds=10.0,
        retry_period_seconds=2.0,
        resource_name="gpusched",
        resource_namespace="kube-system",
    )


def test_leader_election_is_read(registry: Registry) -> None:
    cfg = config_from_dict(
        {
            **CONFIG_HEAD,
            "leaderElection": {
                "leaderElect": False,
                "leaseDurationSeconds": 3,
                "renewDeadlineSeconds": 2,
                "retryPeriodSeconds": 0.5,
                "resourceName": "gpusched-test",
                "resourceNamespace": "gpu-system",
            },
        },
        registry,
    )
    assert cfg.leader_election == LeaderElection(False, 3, 2.0, 0.5, "gpusched-test", "gpu-system")
    assert config_from_dict(config_to_document(cfg), registry) == cfg


def test_watch_and_liveness_settings_are_read(registry: Registry) -> None:
    cfg = config_from_dict(
        {
            **CONFIG_HEAD,
            "clientConnection": {"tcpKeepaliveSeconds": 15},
            "watch": {
                "timeoutSeconds": 30,
                "readTimeoutSeconds": 45,
                "initialBackoffSeconds": 1,
                "maxBackoffSeconds": 10,
                "backoffResetSeconds": 60,
            },
            "liveness": {"watchStallSeconds": 100, "loopStallSeconds": 20},
        },
        registry,
    )
    assert cfg.client_connection.tcp_keepalive_seconds == 15
    assert cfg.watch == Watch(30, 45.0, 1.0, 10.0, 60.0)
    assert cfg.liveness == Liveness(100.0, 20.0)
    assert config_from_dict(config_to_document(cfg), registry) == cfg


def test_settings_are_read(registry: Registry) -> None:
    cfg = config_from_dict(
        {
            **CONFIG_HEAD,
            "clientConnection": {"qps": 5, "burst": 7},
            "podInitialBackoffSeconds": 2,
            "podMaxBackoffSeconds": 20.5,
            "podMaxInUnschedulablePodsDurationSeconds": 60,
            "topologyKeys": {"rack": "example.com/rack", "clique": "example.com/nvl-domain"},
            "maxCardsPerNode": 16,
            "tieBreakSeed": 42,
        },
        registry,
    )
    assert cfg.tie_break_seed == 42
    assert (cfg.client_connection.qps, cfg.client_connection.burst) == (5.0, 7)
    assert cfg.pod_initial_backoff_seconds == 2.0
    assert cfg.pod_max_backoff_seconds == 20.5
    assert cfg.pod_max_in_unschedulable_pods_duration_seconds == 60
    assert cfg.topology_keys == TopologyKeys(
        "example.com/rack", "topology.gpusched.io/spine", "example.com/nvl-domain"
    )
    assert cfg.max_cards_per_node == 16


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"podMaxBackoffSeconds": 0.5},
            "podMaxBackoffSeconds: must be >= podInitialBackoffSeconds (1.0), got 0.5",
        ),
        ({"podInitialBackoffSeconds": 0}, "podInitialBackoffSeconds: must be > 0, got 0"),
        (
            {"podMaxInUnschedulablePodsDurationSeconds": -1},
            "podMaxInUnschedulablePodsDurationSeconds: must be > 0, got -1",
        ),
        # A field that was removed says why, rather than "unknown field".
        (
            {"assumeTTLSeconds": 30},
            "assumeTTLSeconds: removed: a pod whose Binding succeeded is never forgotten",
        ),
        (
            {"tieBreakseed": 5},
            "tieBreakseed: unknown field (did you mean 'tieBreakSeed'?)",
        ),
        ({"maxCardsPerNode": 0}, "maxCardsPerNode: must be between 1 and 63, got 0"),
        ({"tieBreakSeed": -1}, "tieBreakSeed: must be between 0 and 2^63-1, got -1"),
        ({"tieBreakSeed": "x"}, "tieBreakSeed: expected an integer, got 'x'"),
        ({"maxCardsPerNode": 64}, "maxCardsPerNode: must be between 1 and 63, got 64"),
        ({"maxCardsPerNode": 8.5}, "maxCardsPerNode: expected an integer, got 8.5"),
        (
            {"clientConnection": {"qps": "fast"}},
            "clientConnection.qps: expected a number, got 'fast'",
        ),
        ({"clientConnection": {"burst": 0}}, "clientConnection.burst: must be >= 1, got 0"),
        ({"clientConnection": {"kubeconfig": "x"}}, "clientConnection.kubeconfig: unknown field"),
        ({"topologyKeys": {"rack": "bad key!"}}, "topologyKeys.rack: is not a valid label key"),
        ({"topologyKeys": {"clique": "a b"}}, "topologyKeys.clique: is not a valid label key"),
        (
            {"clientConnection": {"tcpKeepaliveSeconds": 0}},
            "clientConnection.tcpKeepaliveSeconds: must be >= 1, got 0",
        ),
        (
            {"watch": {"readTimeoutSeconds": 60}},
            "watch.readTimeoutSeconds: must be > timeoutSeconds (60), got 60",
        ),
        ({"watch": {"timeoutSeconds": 0}}, "watch.timeoutSeconds: must be >= 1, got 0"),
        ({"watch": {"timeoutSeconds": 1.5}}, "watch.timeoutSeconds: expected an integer"),
        (
            {"watch": {"maxBackoffSeconds": 0.5}},
            "watch.maxBackoffSeconds: must be >= initialBackoffSeconds (0.8), got 0.5",
        ),
        (
            {"watch": {"initialBackoffSeconds": 0}},
            "watch.initialBackoffSeconds: must be > 0, got 0",
        ),
        (
            {"watch": {"backoffResetSeconds": -1}},
            "watch.backoffResetSeconds: must be > 0, got -1",
        ),
        (
            {"liveness": {"watchStallSeconds": 90}},
            "liveness.watchStallSeconds: must be > watch.readTimeoutSeconds (90.0), got 90",
        ),
        ({"liveness": {"loopStallSeconds": 0}}, "liveness.loopStallSeconds: must be > 0, got 0"),
        (
            {"topologyKeys": {"rack": "Bad_Prefix/rack"}},
            "topologyKeys.rack: is not a valid label key: the prefix",
        ),
        (
            {"topologyKeys": {"spine": "topology.gpusched.io/rack"}},
            "topologyKeys.spine: must differ from topologyKeys.rack,"
            " got 'topology.gpusched.io/rack'",
        ),
        ({"profile": []}, "profile: unknown field (did you mean 'profiles'?)"),
        (
            {"leaderElection": {"renewDeadlineSeconds": 15}},
            "leaderElection.renewDeadlineSeconds: must be < leaseDurationSeconds (15), got 15",
        ),
        (
            {"leaderElection": {"retryPeriodSeconds": 12, "leaseDurationSeconds": 20}},
            "leaderElection.retryPeriodSeconds: must be < renewDeadlineSeconds (10.0), got 12",
        ),
        (
            {"leaderElection": {"retryPeriodSeconds": 0}},
            "leaderElection.retryPeriodSeconds: must be > 0, got 0",
        ),
        (
            {"leaderElection": {"leaseDurationSeconds": -1}},
            "leaderElection.leaseDurationSeconds: must be > 0, got -1",
        ),
        (
            {"leaderElection": {"leaseDurationSeconds": 2.5}},
            "leaderElection.leaseDurationSeconds: expected an integer, got 2.5",
        ),
        (
            {"leaderElection": {"leaderElect": "no"}},
            "leaderElection.leaderElect: expected a boolean (true/false), got 'no'",
        ),
        (
            {"leaderElection": {"resourceName": "GPU_sched"}},
            "leaderElection.resourceName: must be a DNS subdomain",
        ),
        (
            {"leaderElection": {"resourceNamespace": "kube.system"}},
            "leaderElection.resourceNamespace: must be a namespace name",
        ),
        (
            {"leaderElection": {"leaseDuration": 15}},
            "leaderElection.leaseDuration: unknown field (did you mean 'leaseDurationSeconds'?)",
        ),
    ],
)
def test_setting_errors(registry: Registry, settings: dict[str, Any], message: str) -> None:
    assert config_load_error({**CONFIG_HEAD, **settings}, registry).startswith(message)


def test_valid_label_keys(registry: Registry) -> None:
    cfg = config_from_dict(
        {
            **CONFIG_HEAD,
            "topologyKeys": {"rack": "cloud.google.com/gke-placement-group", "spine": "spine"},
        },
        registry,
    )
    assert cfg.topology_keys.spine == "spine"

"""The local control plane's feature-gate flags: every component gets the same gates."""

from __future__ import annotations

from gpusched.devcluster import ClusterOptions, LocalCluster
from gpusched.devcluster.cluster import WORKLOAD_API, WORKLOAD_FEATURE_GATES


def test_workload_gates_reach_every_component_with_the_users_own() -> None:
    local = LocalCluster(ClusterOptions(apiserver_args=("--feature-gates=Foo=true", "--v=2")))
    gates = local.feature_gates()
    assert gates[0] == "--feature-gates=" + ",".join(f"{g}=true" for g in WORKLOAD_FEATURE_GATES)
    assert "GenericWorkload=true" in gates[0]
    # The user's gates follow (a later --feature-gates adds to the earlier ones); no other
    # apiserver flag leaks to the controller manager or kube-scheduler.
    assert gates[1:] == ["--feature-gates=Foo=true"]
    assert local._workload_api_args() == [f"--runtime-config={WORKLOAD_API}=true", gates[0]]


def test_without_the_workload_api_only_the_users_gates_remain() -> None:
    local = LocalCluster(
        ClusterOptions(workload_api=False, apiserver_args=("--feature-gates=Foo=true",))
    )
    assert local.feature_gates() == ["--feature-gates=Foo=true"]
    assert local._workload_api_args() == []

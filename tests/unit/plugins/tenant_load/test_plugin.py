"""TenantLoad: the share of a node's GPUs the pod's tenant holds lowers the node's score."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched.config.args import convert
from gpusched.config.profile import ConfigError
from gpusched.core.handle import SchedulerHandle
from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import Allocation
from gpusched.framework.tenancy import StaticTenancy
from gpusched.model.pod import PodInfo, PodRequest
from gpusched.plugins.tenant_load import TenantLoad
from gpusched.plugins.tenant_load.args import TenantLoadArgs
from tests.builders import GiB, cache_with
from tests.fakes import FakeCluster


def gpu_pod(name: str, ns: str, cards: int = 0, milli: int = 0) -> PodInfo:
    return PodInfo(
        uid=f"{ns}/{name}",
        namespace=ns,
        name=name,
        request=PodRequest(cpu_milli=1000, memory_bytes=GiB, gpu_cards=cards, gpu_milli=milli),
    )


@pytest.fixture
def handle() -> SchedulerHandle:
    cache = cache_with("n1", "n2", "n3")  # 8 cards each
    # Namespaces team-a and team-a-dev are one tenant; team-b another.
    tenancy = StaticTenancy((), {"team-a": "a", "team-a-dev": "a", "team-b": "b"})
    h = SchedulerHandle(cache, FakeCluster(), lambda: 0.0, tenancy=tenancy)

    def place(p: PodInfo, node: str, cards: tuple[int, ...], milli: int = 1000) -> None:
        row = cache.snapshot.row_of(node)
        cache.assume(p, Allocation(node, row, cards, (milli,) * len(cards), (0,) * len(cards)))

    place(gpu_pod("x", "team-a", cards=4), "n1", (0, 1, 2, 3))
    place(gpu_pod("y", "team-a-dev", milli=500), "n1", (4,), 500)
    place(gpu_pod("z", "team-a", cards=2), "n2", (0, 1))
    place(gpu_pod("w", "team-b", cards=8), "n3", tuple(range(8)))
    return h


def rows(h: SchedulerHandle) -> np.ndarray:
    return np.asarray([h.snapshot.row_of(n) for n in ("n1", "n2", "n3")], np.int64)


def test_the_tenants_share_of_each_node_lowers_its_score(handle: SchedulerHandle) -> None:
    plugin = TenantLoad(None, handle)
    got = plugin.score(CycleState(), gpu_pod("new", "team-a-dev", cards=1), rows(handle))
    # Tenant a holds 6.5 of the 14.5 GPUs in use: up to 6.5/14.5 of a node is its
    # proportion. n1: 4.5 of 8 cards are a's (both namespaces), beyond it; n2: 2 of 8, within.
    f = 6.5 / 14.5
    assert got.tolist() == pytest.approx([100 * (1 - (4.5 / 8 - f) / (1 - f)), 100.0, 100.0])
    # Tenant b (8 of 14.5) fills n3.
    other = plugin.score(CycleState(), gpu_pod("new", "team-b", milli=300), rows(handle))
    assert other.tolist() == pytest.approx([100.0, 100.0, 0.0])


def test_one_tenant_alone_is_never_penalised(handle: SchedulerHandle) -> None:
    # Everything in use is tenant a's: its proportion is the whole cluster.
    handle.cache.remove_pod("team-b/w")
    plugin = TenantLoad(None, handle)
    got = plugin.score(CycleState(), gpu_pod("new", "team-a", cards=1), rows(handle))
    assert got.tolist() == [100.0] * 3


def test_pods_without_gpus_and_new_tenants_are_not_ranked(handle: SchedulerHandle) -> None:
    plugin = TenantLoad(None, handle)
    cpu_only = PodInfo(uid="c", namespace="team-a", name="c", request=PodRequest(cpu_milli=1))
    assert plugin.score(CycleState(), cpu_only, rows(handle)).tolist() == [100.0] * 3
    fresh = gpu_pod("f", "team-c", cards=1)
    assert plugin.score(CycleState(), fresh, rows(handle)).tolist() == [100.0] * 3


def test_free_share_lets_a_tenant_hold_part_of_a_node(handle: SchedulerHandle) -> None:
    plugin = TenantLoad(TenantLoadArgs(free_share=0.5), handle)
    got = plugin.score(CycleState(), gpu_pod("new", "team-a", cards=1), rows(handle))
    # freeShare 0.5 is above a's proportion (6.5/14.5): n1 (4.5/8 - 0.5) / 0.5 = 0.125 over.
    assert got.tolist() == pytest.approx([87.5, 100.0, 100.0])


def test_args_are_checked() -> None:
    assert convert(TenantLoadArgs, {"freeShare": 0.25}, "args") == TenantLoadArgs(0.25)
    with pytest.raises(ConfigError, match=r"freeShare: must be in \[0, 1\), got 1.0"):
        convert(TenantLoadArgs, {"freeShare": 1.0}, "args")

"""activeQ fair across tenants: priority, then the share read at pop time, then `less`."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from gpusched.core.queue import QueuedPodInfo
from gpusched.core.queue.active import ActiveQueue
from gpusched.model.pod import Gang, GangAPI, PodInfo, PodRequest
from gpusched.plugins.priority_sort import PrioritySort


class Shares:
    """A TenantFairSort whose shares the test sets between pops (the cluster changing)."""

    def __init__(self, **shares: float) -> None:
        self.now: dict[str, float] = dict(shares)
        self.asked: list[tuple[str, ...]] = []

    def tenant_of(self, pod: PodInfo) -> str:
        return pod.namespace

    def shares(self, tenants: Collection[str]) -> Mapping[str, float]:
        self.asked.append(tuple(sorted(tenants)))
        return {t: self.now[t] for t in tenants}


def pod(
    ns: str, name: str, *, created: float = 0.0, priority: int = 0, gang: str = ""
) -> QueuedPodInfo:
    p = PodInfo(
        uid=f"{ns}/{name}",
        namespace=ns,
        name=name,
        request=PodRequest(cpu_milli=100),
        priority=priority,
        created=created,
        gang=Gang(f"{ns}/{gang}", 3, GangAPI.ANNOTATIONS) if gang else None,
    )
    return QueuedPodInfo(p, added=0.0)


def names(q: ActiveQueue, n: int) -> list[str]:
    out = []
    for _ in range(n):
        info = q.pop()
        assert info is not None
        out.append(info.uid)
    return out


LESS = PrioritySort(None, None).less  # type: ignore[arg-type]


def test_lower_share_first_and_shares_read_at_each_pop() -> None:
    fair = Shares(a=0.1, b=0.5)
    q = ActiveQueue(LESS, fair)
    for i in range(3):
        q.push(pod("a", f"p{i}", created=i))
        q.push(pod("b", f"p{i}", created=10 + i))
    assert names(q, 1) == ["a/p0"]
    fair.now["a"] = 0.9  # a's pod was placed: its share went up
    assert names(q, 1) == ["b/p0"]
    fair.now["b"] = 0.95
    assert names(q, 1) == ["a/p1"]
    # Equal shares: `less` decides (a's pods are older).
    fair.now["b"] = 0.9
    assert names(q, 3) == ["a/p2", "b/p1", "b/p2"]
    assert q.pop() is None
    assert len(q) == 0


def test_priority_comes_before_share() -> None:
    fair = Shares(a=5.0, b=0.0)
    q = ActiveQueue(LESS, fair)
    q.push(pod("b", "low", created=0))
    q.push(pod("a", "high", created=9, priority=100))
    assert names(q, 2) == ["a/high", "b/low"]
    # The share is asked only among heads of equal priority.
    assert fair.asked == []


def test_a_gang_pops_whole_even_when_its_tenant_share_rises() -> None:
    fair = Shares(a=0.0, b=0.5)
    q = ActiveQueue(LESS, fair)
    for i in range(3):
        q.push(pod("a", f"g{i}", created=i, gang="job"))
    q.push(pod("a", "solo", created=5))
    q.push(pod("b", "x", created=1))
    assert names(q, 1) == ["a/g0"]
    fair.now["a"] = 1.0  # the first member is placed; a is now far above b
    assert names(q, 2) == ["a/g1", "a/g2"]
    # The gang is done: the shares decide again.
    assert names(q, 2) == ["b/x", "a/solo"]


def test_removed_and_updated_pods_and_compaction() -> None:
    fair = Shares(a=0.2, b=0.1)
    q = ActiveQueue(LESS, fair)
    for i in range(100):
        q.push(pod("a", f"p{i}", created=i))
        q.push(pod("b", f"p{i}", created=i))
    for i in range(100):
        assert q.remove(f"b/p{i}") is not None
    for i in range(1, 100):
        assert q.remove(f"a/p{i}") is not None
    assert len(q) == 1
    q.push(pod("a", "p0", created=50))  # an update re-sorts it
    assert len(q) == 1
    assert names(q, 1) == ["a/p0"]
    assert q.pop() is None


def test_without_fairness_the_order_is_less_alone() -> None:
    q = ActiveQueue(LESS)
    q.push(pod("b", "x", created=2))
    q.push(pod("a", "y", created=3))
    q.push(pod("a", "z", created=1))
    assert names(q, 3) == ["a/z", "b/x", "a/y"]

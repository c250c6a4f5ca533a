"""PrioritySort: priority desc, then creation asc, then namespace/name."""

from __future__ import annotations

import functools

from gpusched.framework import QueueSortPlugin
from gpusched.model.pod import PodInfo
from gpusched.plugins.priority_sort import PrioritySort
from tests.builders import pod, snapshot
from tests.fakes import FakeHandle


def sort(pods: list[PodInfo]) -> list[str]:
    plugin = PrioritySort(None, FakeHandle(snapshot()))

    def cmp(a: PodInfo, b: PodInfo) -> int:
        return -1 if plugin.less(a, b) else (1 if plugin.less(b, a) else 0)

    key = functools.cmp_to_key(cmp)
    return [p.name for p in sorted(pods, key=key)]


def test_is_a_queue_sort_plugin() -> None:
    assert isinstance(PrioritySort(None, FakeHandle(snapshot())), QueueSortPlugin)
    assert PrioritySort.name == "PrioritySort"


def test_higher_priority_first_even_if_younger() -> None:
    pods = [pod("low", priority=0, created=1.0), pod("high", priority=10, created=99.0)]
    assert sort(pods) == ["high", "low"]


def test_negative_priorities_order_below_zero() -> None:
    pods = [pod("neg", priority=-5), pod("zero", priority=0)]
    assert sort(pods) == ["zero", "neg"]


def test_equal_priority_older_first() -> None:
    pods = [pod("young", created=20.0), pod("old", created=10.0)]
    assert sort(pods) == ["old", "young"]


def test_full_tie_breaks_by_namespace_then_name() -> None:
    a = PodInfo(uid="1", namespace="b", name="a", request=pod().request)
    b = PodInfo(uid="2", namespace="a", name="z", request=pod().request)
    c = PodInfo(uid="3", namespace="a", name="y", request=pod().request)
    assert sort([a, b, c]) == ["y", "z", "a"]


def test_less_is_a_strict_order() -> None:
    plugin = PrioritySort(None, FakeHandle(snapshot()))
    p = pod("same")
    assert not plugin.less(p, p)

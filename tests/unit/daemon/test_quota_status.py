"""QuotaStatusPublisher: status.used per ElasticQuota from the cache's usage, and the
Warning Events each object should carry."""

from __future__ import annotations

from dataclasses import replace

from gpusched.core.handle import SchedulerHandle
from gpusched.daemon.quota_status import QuotaStatusPublisher
from gpusched.kube.quotas import KubeQuotas
from gpusched.kube.watch import EventType
from gpusched.model import keys
from gpusched.model.elastic_quota import elastic_quota_from_k8s
from gpusched.model.pod import PodInfo, PodRequest
from gpusched.operator.quota_board import INVALID_QUOTA, MINIMUMS_EXCEED_CLUSTER, QuotaBoard
from tests.builders import cache_with
from tests.fakes import FakeKube
from tests.unit.kube.test_quotas import eq


def setup(*nodes: str) -> tuple[QuotaStatusPublisher, KubeQuotas, SchedulerHandle, QuotaBoard]:
    cache = cache_with(*nodes)
    quotas = KubeQuotas(FakeKube(list))  # type: ignore[arg-type]
    handle = SchedulerHandle(cache, None, lambda: 0.0, tenancy=quotas)  # type: ignore[arg-type]
    board = QuotaBoard()
    publisher = QuotaStatusPublisher(board, quotas, handle)
    cache.usage_changed = publisher.namespace_used
    quotas.on_change = publisher.touch_all
    return publisher, quotas, handle, board


def add(quotas: KubeQuotas, raw: dict[str, object]) -> None:
    quotas.watch.handler(EventType.ADDED, elastic_quota_from_k8s(raw))


def bound(name: str, ns: str, cards: int = 0, milli: int = 0) -> PodInfo:
    return PodInfo(
        f"uid-{name}",
        ns,
        name,
        PodRequest(cpu_milli=500, gpu_cards=cards, gpu_milli=milli),
        node_name="a",
        phase="Running",
    )


def test_used_covers_the_named_resources_and_gpus_across_the_tenants_namespaces() -> None:
    publisher, quotas, handle, board = setup("a")
    quotas.set_namespace("ml-1", {keys.TENANT_LABEL: "ml"})
    quotas.set_namespace("ml-2", {keys.TENANT_LABEL: "ml"})
    add(quotas, eq("quota", "ml-1", min={"cpu": "4"}, max={"pods": 10}))
    handle.cache.add_or_update_pod(bound("p", "ml-1", cards=2))
    handle.cache.add_or_update_pod(bound("q", "ml-2", milli=500))
    handle.cache.add_or_update_pod(bound("r", "other", cards=1))
    publisher.flush()
    report = board.get("ml-1/quota")
    assert report is not None and report.tenant == "ml"
    assert report.used == {"nvidia.com/gpu": "2500m", "cpu": "1", "pods": "2"}
    assert report.warnings == ()
    # A pod leaving: only its tenant is recomputed, and status.used follows.
    handle.cache.remove_pod("uid-p")
    publisher.flush()
    report = board.get("ml-1/quota")
    assert report is not None and report.used["nvidia.com/gpu"] == "500m"
    handle.cache.remove_pod("uid-q")
    publisher.flush()
    report = board.get("ml-1/quota")
    assert report is not None and report.used == {"nvidia.com/gpu": "0", "cpu": "0", "pods": "0"}


def test_an_invalid_quota_gets_its_problem_as_a_warning() -> None:
    publisher, quotas, _, board = setup("a")
    add(quotas, eq(max={"nvidia.com/gpus": 8}))
    publisher.flush()
    report = board.get("team-a/quota")
    assert report is not None
    ((reason, message),) = report.warnings
    assert reason == INVALID_QUOTA
    assert "spec.max['nvidia.com/gpus'] is not a resource gpusched counts" in message
    assert "the pods of tenant 'team-a' are refused until it is fixed" in message


def test_mins_above_the_cluster_warn_on_every_quota_whose_min_names_the_resource() -> None:
    publisher, quotas, _, board = setup("a")  # one node: 8 GPUs
    add(quotas, eq("q", "team-a", min={"nvidia.com/gpu": 8}))
    add(quotas, eq("q", "team-b", min={"nvidia.com/gpu": 4}))
    add(quotas, eq("q", "team-c", max={"nvidia.com/gpu": 4}))
    publisher.flush()
    a, b, c = (board.get(f"team-{t}/q") for t in "abc")
    assert a is not None and b is not None and c is not None
    assert a.warnings == (
        (
            MINIMUMS_EXCEED_CLUSTER,
            "the ElasticQuotas' mins of nvidia.com/gpu add up to 12 GPUs, more than the"
            " cluster's 8 GPUs: every min of nvidia.com/gpu is scaled down in proportion,"
            " this one's 8 GPUs to 5.333 GPUs",
        ),
    )
    ((reason, message),) = b.warnings
    assert reason == MINIMUMS_EXCEED_CLUSTER and "4 GPUs to 2.666 GPUs" in message
    assert c.warnings == ()
    # The object deleted: its report goes.
    quotas.watch.handler(EventType.DELETED, elastic_quota_from_k8s(eq("q", "team-c")))
    publisher.flush()
    assert board.get("team-c/q") is None


def test_a_change_of_nothing_publishes_no_change() -> None:
    publisher, quotas, handle, board = setup("a")
    add(quotas, eq(max={"nvidia.com/gpu": 8}))
    publisher.flush()
    seen: list[frozenset[str]] = []
    board.subscribe(seen.append)
    p = bound("p", "team-a", cards=1)
    handle.cache.add_or_update_pod(p)
    handle.cache.add_or_update_pod(replace(p, labels={"x": "y"}))
    publisher.flush()
    publisher.flush()
    assert seen == [frozenset({"team-a/quota"})]

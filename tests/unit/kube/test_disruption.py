"""The disruption port's pure parts: which PodDisruptionBudgets cover a pod (policy/v1's
selector semantics), how many disruptions each allows, the writes of an eviction and a
nomination in kube-scheduler's order, and the fence."""

from __future__ import annotations

from typing import Any

from gpusched.framework.status import Code
from gpusched.kube.client import ApiError
from gpusched.kube.disruption import (
    PENDING_SECONDS,
    KubeDisruption,
    budget_from_k8s,
    disruption_target_message,
)
from gpusched.kube.watch import EventType
from gpusched.kube.writer import ClusterWriter
from gpusched.model.pod import PodInfo, PodRequest
from tests.fakes import FakeKube


def pdb(
    name: str,
    selector: Any,
    *,
    allowed: int = 1,
    namespace: str = "ns",
    generation: int = 1,
    observed: int | None = 1,
    rv: str = "10",
    uid: str = "",
) -> dict[str, Any]:
    spec = {} if selector is ... else {"selector": selector}
    status: dict[str, Any] = {"disruptionsAllowed": allowed}
    if observed is not None:
        status["observedGeneration"] = observed
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "generation": generation,
            "resourceVersion": rv,
        },
        "spec": spec,
        "status": status,
    }


def pod(name: str = "p", labels: dict[str, str] | None = None, ns: str = "ns") -> PodInfo:
    return PodInfo(
        uid=f"u-{name}",
        namespace=ns,
        name=name,
        request=PodRequest(),
        labels=labels or {},
        scheduler_name="ai-scheduler",
    )


def port(kube: FakeKube | None = None, fence: str | None = None) -> KubeDisruption:
    kube = kube or FakeKube(list)
    writer = ClusterWriter(kube)  # type: ignore[arg-type]
    return KubeDisruption(kube, writer, fence=lambda: fence, clock=lambda: 0.0)  # type: ignore[arg-type]


def seen(p: KubeDisruption, *objs: dict[str, Any], kind: EventType = EventType.ADDED) -> None:
    for obj in objs:
        p._on_budget(kind, budget_from_k8s(obj))


def test_selectors_match_as_the_policy_v1_lister_does() -> None:
    p = port()
    seen(
        p,
        pdb("labels", {"matchLabels": {"app": "train"}}, allowed=2),
        pdb("exprs", {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]}),
        pdb("notin", {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}),
        # policy/v1: an empty selector covers every pod of the namespace (kube-scheduler's
        # preemption reads it as nothing; the eviction API and the controller as everything).
        pdb("empty", {}),
        # An absent selector (nil) covers none.
        pdb("nil", ...),
        pdb("elsewhere", {}, namespace="other"),
    )
    train = {b.key: b.disruptions_allowed for b in p.budgets_of(pod(labels={"app": "train"}))}
    assert train == {"ns/labels": 2, "ns/notin": 1, "ns/empty": 1}
    tier_a = {b.key for b in p.budgets_of(pod(labels={"tier": "a"}))}
    assert tier_a == {"ns/exprs", "ns/empty"}
    assert {b.key for b in p.budgets_of(pod(ns="third"))} == set()
    assert {b.key for b in p.budgets_of(pod(ns="other"))} == {"other/elsewhere"}


def test_a_budget_allows_nothing_until_its_status_is_computed_for_its_spec() -> None:
    assert budget_from_k8s(pdb("a", {}, allowed=3)).disruptions_allowed == 3
    fresh = budget_from_k8s(pdb("b", {}, allowed=3, observed=None))
    assert fresh.disruptions_allowed == 0 and "not computed" in fresh.problem
    changed = budget_from_k8s(pdb("c", {}, allowed=3, generation=2, observed=1))
    assert changed.disruptions_allowed == 0 and "generation 2" in changed.problem
    bogus = budget_from_k8s(pdb("d", {}, allowed=-1))
    assert bogus.disruptions_allowed == 0 and "not a count" in bogus.problem


def test_a_selector_that_does_not_parse_covers_the_namespace_and_allows_nothing() -> None:
    bad = {"matchExpressions": [{"key": "app", "operator": "Near", "values": ["x"]}]}
    p = port()
    seen(p, pdb("bad", bad, allowed=5))
    [budget] = p.budgets_of(pod(labels={"unrelated": "x"}))
    assert budget.key == "ns/bad" and budget.disruptions_allowed == 0
    assert "does not parse" in budget.problem and "Near" in budget.problem


def test_a_deletion_removes_the_budget_unless_it_was_replaced() -> None:
    p = port()
    seen(p, pdb("a", {}, uid="old"))
    seen(p, pdb("a", {}, uid="new"))  # re-created under the same name
    seen(p, pdb("a", {}, uid="old"), kind=EventType.DELETED)  # the stale deletion
    assert [b.key for b in p.budgets_of(pod())] == ["ns/a"]
    seen(p, pdb("a", {}, uid="new"), kind=EventType.DELETED)
    assert p.budgets_of(pod()) == ()


async def test_an_eviction_writes_the_condition_then_deletes_then_records_the_event() -> None:
    kube = FakeKube(list)
    p = port(kube)
    victim, preemptor = pod("victim"), pod("big")
    st = await p.evict(victim, preemptor=preemptor, node="n1", message="")
    assert st.is_success(), st
    path = "/api/v1/namespaces/ns/pods/victim"
    assert kube.requests == [
        ("PATCH", f"{path}/status"),
        ("DELETE", path),
        ("POST", "/api/v1/namespaces/ns/events"),
    ]
    patch, delete, event = kube.bodies
    assert patch["metadata"] == {"uid": "u-victim"}
    [cond] = patch["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == (
        "DisruptionTarget",
        "True",
        "PreemptionByScheduler",
    )
    assert cond["message"] == disruption_target_message(preemptor)
    assert cond["message"] == "ai-scheduler: preempting to accommodate a higher priority pod"
    assert delete["preconditions"] == {"uid": "u-victim"}
    reported = (event["reason"], event["type"], event["action"])
    assert reported == ("Preempted", "Normal", "Preempting")
    assert event["message"] == "Preempted by pod u-big on node n1"
    assert event["involvedObject"]["uid"] == "u-victim"
    assert event["related"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "big",
        "uid": "u-big",
        "namespace": "ns",
    }


class _Answers(FakeKube):
    """Answers the request whose (method, path suffix) is listed with that HTTP status."""

    def __init__(self, answers: dict[tuple[str, str], tuple[int, str]]) -> None:
        super().__init__(list)
        self.answers = answers

    async def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        for (m, suffix), (code, message) in self.answers.items():
            if m == method and path.endswith(suffix):
                self.requests.append((method, path))
                self.bodies.append(kw.get("body"))
                body = f'{{"kind": "Status", "code": {code}, "message": "{message}"}}'
                raise ApiError(method, path, code, body)
        return await super().request(method, path, **kw)


async def test_a_victim_already_gone_or_replaced_is_a_success_without_an_event() -> None:
    for answers in (
        {("PATCH", "/status"): (404, 'pods "victim" not found')},
        {("DELETE", "/victim"): (404, 'pods "victim" not found')},
        {
            ("DELETE", "/victim"): (
                409,
                "Precondition failed: UID in precondition: u-victim, UID in object meta: u-2",
            )
        },
    ):
        kube = _Answers(answers)
        st = await port(kube).evict(pod("victim"), preemptor=pod("big"), node="n1", message="m")
        assert st.is_success(), (answers, st)
        assert all(method != "POST" for method, _ in kube.requests), answers


async def test_a_refused_eviction_is_an_error_status_and_deletes_nothing() -> None:
    kube = _Answers({("PATCH", "/status"): (403, "forbidden")})
    st = await port(kube).evict(pod("victim"), preemptor=pod("big"), node="n1", message="m")
    assert st.code is Code.ERROR and "manifests/rbac" in st.message()
    assert [m for m, _ in kube.requests] == ["PATCH"]


async def test_a_fenced_instance_writes_nothing() -> None:
    kube = FakeKube(list)
    p = port(kube, fence="this instance does not hold the leader Lease")
    st = await p.evict(pod("victim"), preemptor=pod("big"), node="n1", message="m")
    assert st.code is Code.ERROR and "leader Lease" in st.message()
    st = await p.nominate(pod("big"), "n1")
    assert st.code is Code.ERROR
    assert kube.requests == []


async def test_nominate_sets_and_clears_the_nominated_node() -> None:
    kube = FakeKube(list)
    p = port(kube)
    assert (await p.nominate(pod("big"), "n1")).is_success()
    assert (await p.nominate(pod("big"), "")).is_success()
    assert kube.requests == [("PATCH", "/api/v1/namespaces/ns/pods/big/status")] * 2
    assert [b["status"] for b in kube.bodies] == [
        {"nominatedNodeName": "n1"},
        {"nominatedNodeName": None},
    ]
    assert all(b["metadata"] == {"uid": "u-big"} for b in kube.bodies)


async def test_our_uncounted_evictions_lower_the_budget_until_its_status_changes() -> None:
    t = [0.0]
    kube = FakeKube(list)
    p = KubeDisruption(kube, ClusterWriter(kube), clock=lambda: t[0])  # type: ignore[arg-type]
    seen(p, pdb("guard", {"matchLabels": {"app": "a"}}, allowed=2, rv="10"))
    a1, a2 = pod("a1", {"app": "a"}), pod("a2", {"app": "a"})
    assert (await p.evict(a1, preemptor=pod("big"), node="n1", message="")).is_success()
    # The controller has not rewritten the status: it still counts a1 as healthy.
    assert [b.disruptions_allowed for b in p.budgets_of(a2)] == [1]
    # A newer status of the budget counts the deletion itself.
    seen(p, pdb("guard", {"matchLabels": {"app": "a"}}, allowed=1, rv="11"))
    assert [b.disruptions_allowed for b in p.budgets_of(a2)] == [1]
    # Without a newer status, an uncounted eviction expires.
    assert (await p.evict(a2, preemptor=pod("big"), node="n1", message="")).is_success()
    assert [b.disruptions_allowed for b in p.budgets_of(pod("a3", {"app": "a"}))] == [0]
    t[0] += PENDING_SECONDS
    assert [b.disruptions_allowed for b in p.budgets_of(pod("a3", {"app": "a"}))] == [1]


async def test_a_status_written_while_the_deletion_is_answered_already_counts_it() -> None:
    # The controller may rewrite the budget (counting the terminating victim) before the
    # DELETE's answer reaches us: that newer status must not be discounted again.
    class _Racing(FakeKube):
        port: KubeDisruption

        async def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
            if method == "DELETE":
                seen(self.port, pdb("guard", {"matchLabels": {"app": "a"}}, allowed=0, rv="11"))
            return await super().request(method, path, **kw)

    kube = _Racing(list)
    p = port(kube)
    kube.port = p
    seen(p, pdb("guard", {"matchLabels": {"app": "a"}}, allowed=1, rv="10"))
    a1, a2 = pod("a1", {"app": "a"}), pod("a2", {"app": "a"})
    assert (await p.evict(a1, preemptor=pod("big"), node="n1", message="")).is_success()
    assert p.pending == {}
    assert [b.disruptions_allowed for b in p.budgets_of(a2)] == [0]
    seen(p, pdb("guard", {"matchLabels": {"app": "a"}}, allowed=1, rv="12"))  # a3 came up
    assert [b.disruptions_allowed for b in p.budgets_of(a2)] == [1]


async def test_a_status_rewritten_during_the_deletion_for_another_pod_still_counts_it_healthy() -> (
    None
):
    # A namespace-wide budget is rewritten while the DELETE is in flight because the
    # preemptor itself was just created (one more pod expected, the same count healthy):
    # that status still counts the victim, so our eviction must still be subtracted.
    class _Racing(FakeKube):
        port: KubeDisruption

        async def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
            if method == "DELETE":
                seen(self.port, pdb("all", {}, allowed=3, rv="11"))
            return await super().request(method, path, **kw)

    kube = _Racing(list)
    p = port(kube)
    kube.port = p
    seen(p, pdb("all", {}, allowed=3, rv="10"))
    assert (await p.evict(pod("a1"), preemptor=pod("big"), node="n1", message="")).is_success()
    assert [e.resource_version for e in p.pending["ns/all"]] == ["11"]
    assert [b.disruptions_allowed for b in p.budgets_of(pod("a2"))] == [2]
    # The controller's next count includes the deletion: ours is no longer subtracted.
    seen(p, pdb("all", {}, allowed=2, rv="12"))
    assert [b.disruptions_allowed for b in p.budgets_of(pod("a2"))] == [2]


async def test_expired_uncounted_evictions_are_forgotten() -> None:
    t = [0.0]
    kube = FakeKube(list)
    p = KubeDisruption(kube, ClusterWriter(kube), clock=lambda: t[0])  # type: ignore[arg-type]
    seen(p, pdb("guard", {}, allowed=5))
    for i in range(3):
        st = await p.evict(pod(f"a{i}"), preemptor=pod("big"), node="n", message="")
        assert st.is_success()
        t[0] += PENDING_SECONDS
    assert [e.victim for e in p.pending["ns/guard"]] == ["u-a2"]

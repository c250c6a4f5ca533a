"""The writer: API failures mapped to statuses, the client-side rate limiter."""

from __future__ import annotations

import pytest

from gpusched.framework.status import ends_attempt as final
from gpusched.framework.status import outcome_unknown
from gpusched.kube.client import ApiError
from gpusched.kube.writer import ClusterWriter, TokenBucket, WriteError, _failure
from gpusched.model.pod import PodInfo, PodRequest


def _pod() -> PodInfo:
    return PodInfo(uid="u", namespace="ns", name="p", request=PodRequest())


def test_write_failures_map_to_statuses() -> None:
    gone = _failure("bind", _pod(), ApiError("POST", "/x", 404, "{}"))
    assert final(gone) and "no longer exists" in gone.message()
    bound = _failure("bind", _pod(), ApiError("POST", "/x", 409, "{}"))
    assert final(bound)
    denied = _failure("bind", _pod(), ApiError("POST", "/x", 403, "{}"))
    assert not final(denied) and "manifests/rbac" in denied.message()
    flaky = _failure("bind", _pod(), ApiError("POST", "/x", 503, "{}"))
    assert not final(flaky) and isinstance(flaky.error, WriteError)
    net = _failure("bind", _pod(), OSError("connection reset"))
    assert not final(net) and "may have been applied" in net.message()
    # A 4xx was refused before it was applied; no answer or a 5xx may have landed.
    assert [outcome_unknown(s) for s in (gone, bound, denied, flaky, net)] == [
        False,
        False,
        False,
        True,
        True,
    ]
    throttled = _failure("bind", _pod(), ApiError("POST", "/x", 429, "{}"))
    assert not outcome_unknown(throttled) and "will retry" in throttled.message()


async def test_token_bucket_spends_the_burst_then_waits() -> None:
    t = [0.0]
    bucket = TokenBucket(qps=10, burst=3, clock=lambda: t[0])
    for _ in range(3):
        await bucket.acquire()
    assert bucket.tokens == pytest.approx(0)
    t[0] += 0.1  # one token refilled
    await bucket.acquire()
    assert bucket.tokens == pytest.approx(0)


class _Posts:
    """Records what the writer posts (the Kube methods bind_pod uses)."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, dict[str, object]]] = []

    async def post(self, path: str, body: dict[str, object]) -> dict[str, object]:
        self.posted.append((path, body))
        return {}


async def test_the_card_assignment_travels_in_the_binding() -> None:
    kube = _Posts()
    writer = ClusterWriter(kube)  # type: ignore[arg-type]
    ann = {"gpusched.io/gpu-ids": "3", "gpusched.io/gpu-milli-assigned": "250"}
    assert (await writer.bind(_pod(), "n1", ann)).is_success()
    # One write: the Binding, whose annotations the API server copies onto the pod with
    # spec.nodeName. No pod PATCH, so the scheduler needs no right to patch pods.
    [(path, body)] = kube.posted
    assert path == "/api/v1/namespaces/ns/pods/p/binding"
    assert body["metadata"] == {"name": "p", "namespace": "ns", "uid": "u", "annotations": ann}
    assert body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    assert not hasattr(writer, "annotate")

"""The writer: API failures mapped to statuses, the client-side rate limiter."""

from __future__ import annotations

import pytest

from gpusched.framework.status import ends_attempt as final
from gpusched.kube.client import ApiError
from gpusched.kube.writer import TokenBucket, WriteError, _failure
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
    net = _failure("annotate", _pod(), OSError("connection reset"))
    assert not final(net) and "will retry" in net.message()


async def test_token_bucket_spends_the_burst_then_waits() -> None:
    t = [0.0]
    bucket = TokenBucket(qps=10, burst=3, clock=lambda: t[0])
    for _ in range(3):
        await bucket.acquire()
    assert bucket.tokens == pytest.approx(0)
    t[0] += 0.1  # one token refilled
    await bucket.acquire()
    assert bucket.tokens == pytest.approx(0)

"""The fault suite's judge on hand-made API objects: each invariant caught, a sound cluster
passes."""

from __future__ import annotations

from typing import Any

from gpusched.devcluster.invariants import BindingLog, check
from gpusched.devcluster.nodes import NodeSpec, node_object
from gpusched.model import keys


def _node(name: str = "g") -> dict[str, Any]:
    return node_object(NodeSpec(name, 8, "A100M80", 8000, 16384, "r", "s"))


def _pod(
    name: str, node: str = "g", ids: str | None = None, *, gpus: int = 0, milli: str = ""
) -> dict[str, Any]:
    ann: dict[str, str] = {}
    if ids is not None:
        ann[keys.GPU_IDS] = ids
    if milli:
        ann[keys.GPU_MILLI] = milli
        ann[keys.GPU_MILLI_ASSIGNED] = milli
    requests: dict[str, str] = {"cpu": "100m"}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "annotations": ann},
        "spec": {
            "schedulerName": "ai-scheduler",
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": requests}}],
        },
        "status": {"phase": "Running"},
    }


def test_a_sound_cluster_passes() -> None:
    pods = [
        _pod("w", ids="0,1", gpus=2),
        _pod("s1", ids="2", milli="600"),
        _pod("s2", ids="2", milli="400"),
        _pod("pending", node=""),
    ]
    assert check(pods, [_node()], must_bind=["ns/w", "ns/s1"]) == []


def test_each_violation_is_named() -> None:
    pods = [
        _pod("w1", ids="0", gpus=1),
        _pod("w2", ids="0", gpus=1),  # the same card, whole, twice
        _pod("s1", ids="3", milli="700"),
        _pod("s2", ids="3", milli="400"),  # 1100 milli on card 3
        _pod("few", ids="4", gpus=2),  # asks 2, assigned 1
        _pod("far", ids="9", gpus=1),  # beyond the node's 8 cards
    ]
    found = check(pods, [_node()], must_bind=["ns/never"])
    assert any("card 0 held whole by 2 pods" in v for v in found), found
    assert any("card 3 charged 1100 milli" in v for v in found), found
    assert any("ns/few: asks for 2 card(s), assigned [4]" in v for v in found), found
    assert any("ns/far: cards [9] beyond the 8 of g" in v for v in found), found
    assert any("never bound: ['ns/never']" in v for v in found), found


def test_a_node_over_its_cpu_is_caught() -> None:
    pods = [_pod(f"p{i}") for i in range(81)]  # 81 x 100m on an 8-CPU node
    [violation] = check(pods, [_node()])
    assert violation.startswith("g over capacity: cpu 8100/8000 m")


def test_a_rewritten_assignment_is_a_second_binding() -> None:
    log = BindingLog()
    log.see(_pod("w", node="", ids=None, gpus=1))  # pending: nothing to hold to
    log.see(_pod("w", ids="0", gpus=1))
    log.see(_pod("w", ids="0", gpus=1))  # an unrelated update
    assert log.violations == []
    log.see(_pod("w", ids="5", gpus=1))  # the cards of a running pod rewritten
    [violation] = check([_pod("w", ids="5", gpus=1)], [_node()], log=log)
    assert "ns/w was bound as ('g', '0', '') and later shows ('g', '5', '')" in violation

"""Node annotations for `gpusched agent`: read one, set one with a JSON merge patch.

The agent's rights are exactly these two calls (nodes get + patch, manifests/agent/), and
its ValidatingAdmissionPolicy allows a patch that changes the one annotation only; a merge
patch naming just that key leaves every other field of the node as it is on the server.
"""

from __future__ import annotations

from gpusched.kube.client import Kube


def node_path(name: str) -> str:
    return f"/api/v1/nodes/{name}"


async def node_annotation(kube: Kube, node: str, key: str) -> str | None:
    """The node's annotation `key` (None when it has none). Raises ApiError (404: no such
    node)."""
    obj = await kube.get(node_path(node))
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict):
        return None
    value = annotations.get(key)
    return value if isinstance(value, str) else None


async def set_node_annotation(kube: Kube, node: str, key: str, value: str) -> None:
    """Set annotation `key` of `node` to `value` (JSON merge patch: nothing else changes)."""
    await kube.merge_patch(node_path(node), {"metadata": {"annotations": {key: value}}})

"""The only package that talks to the Kubernetes API (architecture rule: everything else
depends on small ports that the simulator and unit tests implement in memory)."""

from gpusched.kube.client import JSON, ApiError, Kube, WatchEvent
from gpusched.kube.ops import (
    bind_pod,
    create_namespace,
    create_nodes,
    create_or_replace,
    create_pod,
    delete_namespace,
    has_condition,
    pod_path,
    wait_for,
    wait_for_deletion,
)

__all__ = [
    "JSON",
    "ApiError",
    "Kube",
    "WatchEvent",
    "bind_pod",
    "create_namespace",
    "create_nodes",
    "create_or_replace",
    "create_pod",
    "delete_namespace",
    "has_condition",
    "pod_path",
    "wait_for",
    "wait_for_deletion",
]

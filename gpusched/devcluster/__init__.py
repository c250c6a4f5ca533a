"""A local Kubernetes control plane for tests, demos and benchmarks.

etcd + kube-apiserver (token auth, RBAC) + the KWOK controller (plays the kubelet of fake GPU
nodes) + kube-scheduler (the baseline), built by tools/build.sh. ``python -m
gpusched.devcluster up|down|status`` is what `make cluster-up` runs; tests use
:class:`LocalCluster` directly.
"""

from gpusched.devcluster.binaries import BinaryNotFoundError, find_binaries, pinned_versions
from gpusched.devcluster.bootstrap import install_crds, load_nodes, wait_nodes_ready
from gpusched.devcluster.cluster import ClusterOptions, LocalCluster
from gpusched.devcluster.configs import BASELINE_SCHEDULER
from gpusched.devcluster.nodes import (
    KWOK_ANNOTATION,
    NodeSpec,
    generated_fleet,
    node_object,
    read_openb_csv,
)
from gpusched.devcluster.pki import ADMIN, KUBE_SCHEDULER, NO_RIGHTS
from gpusched.devcluster.processes import StartError

__all__ = [
    "ADMIN",
    "BASELINE_SCHEDULER",
    "KUBE_SCHEDULER",
    "KWOK_ANNOTATION",
    "NO_RIGHTS",
    "BinaryNotFoundError",
    "ClusterOptions",
    "LocalCluster",
    "NodeSpec",
    "StartError",
    "find_binaries",
    "generated_fleet",
    "install_crds",
    "load_nodes",
    "node_object",
    "pinned_versions",
    "read_openb_csv",
    "wait_nodes_ready",
]

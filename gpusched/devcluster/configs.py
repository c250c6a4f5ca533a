"""Configuration files for the KWOK controller and the kube-scheduler baseline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpusched.devcluster.nodes import KWOK_SELECTOR
from gpusched.model import keys

# Pod IPs KWOK writes into pod status. Only data: nothing ever connects to them. A /16 so a
# benchmark with tens of thousands of pods does not exhaust KWOK's pool (default /24).
KWOK_POD_CIDR = "10.244.0.1/16"

BASELINE_SCHEDULER = "default-scheduler"

# The stages KWOK plays, as kwokctl's defaults (kustomize/stage/node/fast, pod/fast in
# sigs.k8s.io/kwok v0.8.0, Apache-2.0) minus node heartbeats: without kube-controller-manager
# nothing marks a silent node NotReady, so heartbeats would cost API writes for nothing.
# The standalone controller has no built-in stages, so we must pass these.
_NODE_INITIALIZE = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-initialize
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values: ['True']
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
      conditions:
      {{ range NodeConditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $lastTransitionTime | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type  | Quote}}
      {{ end }}
      addresses:
      {{ with NodeIP }}
      - address: {{ . | Quote }}
        type: InternalIP
      {{ end }}
      {{ with NodeName }}
      - address: {{ . | Quote }}
        type: Hostname
      {{ end }}
      allocatable:
      {{ with .status.allocatable }}
      {{ YAML . 1 }}
      {{ else }}
        cpu: 1k
        memory: 1Ti
        pods: 1M
      {{ end }}
      capacity:
      {{ with .status.capacity }}
      {{ YAML . 1 }}
      {{ else }}
        cpu: 1k
        memory: 1Ti
        pods: 1M
      {{ end }}
      {{ $kwokVersion := printf "kwok-%s" Version }}
      nodeInfo:
        architecture: amd64
        containerRuntimeVersion: {{ $kwokVersion }}
        kernelVersion: {{ $kwokVersion }}
        kubeProxyVersion: {{ $kwokVersion }}
        kubeletVersion: {{ $kwokVersion }}
        operatingSystem: linux
      phase: Running
"""

_POD_READY = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Pending']
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values: ['True']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Initialized
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: ContainersReady
      {{ range .spec.readinessGates }}
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: {{ .conditionType | Quote }}
      {{ end }}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: true
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      initContainerStatuses:
      {{ range .spec.initContainers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: true
        restartCount: 0
        state:
          terminated:
            exitCode: 0
            finishedAt: {{ $now | Quote }}
            reason: Completed
            startedAt: {{ $now | Quote }}
      {{ end }}
      {{ $hostIPs := NodeIPsWith .spec.nodeName }}
      {{ with $hostIPs }}
      hostIP: {{ index . 0 | Quote }}
      hostIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      {{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" )
           ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
      {{ with $podIPs }}
      podIP: {{ index . 0 | Quote }}
      podIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
"""

_POD_COMPLETE = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-complete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.metadata.ownerReferences.[].kind'
      operator: 'In'
      values: ['Job']
  # As kwokctl's stage: a pod annotated pod-complete.stage.kwok.x-k8s.io/delay (e.g. "1h")
  # runs that long before it completes (`make demo`'s training Jobs); others complete at once.
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["pod-complete.stage.kwok.x-k8s.io/delay"]'
  next:
    statusTemplate: |
      {{ $now := Now }}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 0
            finishedAt: {{ $now | Quote }}
            reason: Completed
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Succeeded
"""

# Finishes a graceful deletion, as a kubelet would once the containers stopped.
_POD_DELETE = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
  next:
    delete: true
"""


def kwok_config(pod_cidr: str = KWOK_POD_CIDR) -> str:
    """A multi-document KWOK config: the KwokConfiguration, then the stages."""
    options = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            "manageNodesWithAnnotationSelector": KWOK_SELECTOR,
            # 0 = no node Lease objects; nobody would read them (no node lifecycle controller).
            "nodeLeaseDurationSeconds": 0,
            "cidr": pod_cidr,
            # kube-apiserver dials a node's InternalIP for logs/exec: keep even that on loopback.
            "nodeIP": "127.0.0.1",
            "podPlayStageParallelism": 8,
            "nodePlayStageParallelism": 8,
        },
    }
    stages = (_NODE_INITIALIZE, _POD_READY, _POD_COMPLETE, _POD_DELETE)
    return "---\n".join([yaml.safe_dump(options, sort_keys=False), *stages])


def kube_scheduler_config(
    kubeconfig: Path, *, qps: int = 500, burst: int = 1000, stock: bool = False
) -> str:
    """The baseline: upstream kube-scheduler configured for GPU bin-packing.

    percentageOfNodesToScore 100 scores every feasible node (as gpusched does), and
    MostAllocated with nvidia.com/gpu weighted highest packs GPU pods onto busy nodes, the
    strongest GPU policy kube-scheduler offers without plugins. Raised qps/burst keep the
    client rate limiter from being what a benchmark measures.

    `stock`: the default profile as shipped instead (NodeResourcesFit LeastAllocated on cpu
    and memory, nothing about GPUs), as a cluster without a tuned configuration runs it
    (`make demo`'s comparison).
    """
    if stock:
        plain: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig), "qps": qps, "burst": burst},
            "leaderElection": {"leaderElect": False},
            "profiles": [{"schedulerName": BASELINE_SCHEDULER}],
        }
        return yaml.safe_dump(plain, sort_keys=False)
    config: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": qps, "burst": burst},
        "leaderElection": {"leaderElect": False},
        "percentageOfNodesToScore": 100,
        "profiles": [
            {
                "schedulerName": BASELINE_SCHEDULER,
                "pluginConfig": [
                    {
                        "name": "NodeResourcesFit",
                        "args": {
                            "scoringStrategy": {
                                "type": "MostAllocated",
                                "resources": [
                                    {"name": "cpu", "weight": 1},
                                    {"name": "memory", "weight": 1},
                                    {"name": keys.GPU_RESOURCE, "weight": 10},
                                ],
                            }
                        },
                    }
                ],
            }
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)

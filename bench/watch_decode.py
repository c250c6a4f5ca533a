"""Decode cost of one pod watch event: raw JSON + slim PodInfo vs kubernetes_asyncio models.

    .venv/bin/python bench/watch_decode.py

The daemon's reflector (gpusched/kube/watch.py) decodes each event line with orjson and
turns the dict into a PodInfo; the alternative is the generated client's V1Pod, which
kubernetes_asyncio builds by walking the OpenAPI types of every field.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import orjson
from kubernetes_asyncio.client import ApiClient, Configuration

from gpusched.model.node import node_from_k8s
from gpusched.model.pod import pod_from_k8s

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "train-7f9c-worker-3",
        "namespace": "team-a",
        "uid": "0b6c7c1e-3a0e-4a8e-9a51-6f1f6c2d9e10",
        "resourceVersion": "123456",
        "creationTimestamp": "2026-11-29T08:00:00Z",
        "labels": {"app": "train", "ai.training/job-id": "job-7f9c"},
        "annotations": {"gpusched.io/nvlink": "required", "gpusched.io/gpu-model": "A100M80"},
        "ownerReferences": [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": "train-7f9c",
                "uid": "x",
                "controller": True,
            }
        ],
        "managedFields": [
            {
                "manager": "kube-controller-manager",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-11-29T08:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
            }
        ],
    },
    "spec": {
        "schedulerName": "ai-scheduler",
        "priority": 0,
        "containers": [
            {
                "name": "main",
                "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "command": ["torchrun", "--nproc_per_node=4", "train.py"],
                "env": [{"name": f"VAR_{i}", "value": str(i)} for i in range(8)],
                "resources": {
                    "requests": {"cpu": "16", "memory": "128Gi"},
                    "limits": {"nvidia.com/gpu": "4", "memory": "128Gi"},
                },
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }
        ],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "nvidia.com/gpu.product",
                                    "operator": "In",
                                    "values": ["NVIDIA-A100-SXM4-80GB"],
                                }
                            ]
                        }
                    ]
                }
            }
        },
    },
    "status": {"phase": "Pending", "qosClass": "Burstable"},
}


class _Resp:
    def __init__(self, data: str) -> None:
        self.data = data


def bench(label: str, fn: Callable[[], object], n: int) -> float:
    for _ in range(min(n, 200)):
        fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    us = (time.perf_counter() - t0) / n * 1e6
    print(f"{label:<48} {us:8.1f} µs/event")
    return us


async def main() -> None:
    line = orjson.dumps({"type": "MODIFIED", "object": POD})
    client = ApiClient(Configuration())
    n = 5000

    def slim() -> object:
        return pod_from_k8s(orjson.loads(line)["object"])

    def raw_only() -> object:
        return orjson.loads(line)

    def stdlib_slim() -> object:
        return pod_from_k8s(json.loads(line)["object"])

    def model() -> object:
        event = json.loads(line)
        return client.deserialize(_Resp(json.dumps(event["object"])), "V1Pod")

    print(f"one pod watch event, {len(line)} bytes of JSON")
    raw = bench("orjson.loads only", raw_only, n)
    ours = bench("orjson + pod_from_k8s (the daemon)", slim, n)
    bench("json.loads + pod_from_k8s", stdlib_slim, n)
    full = bench("kubernetes_asyncio V1Pod (deserialize)", model, n // 5)
    print(
        f"slim decoding is {full / ours:.0f}x cheaper than the client model"
        f" (parse alone {raw:.1f} µs)"
    )
    node = {
        "metadata": {"name": "n1", "uid": "u", "labels": {"nvidia.com/gpu.count": "8"}},
        "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"}},
    }
    node_line = orjson.dumps({"type": "MODIFIED", "object": node})
    bench(
        "orjson + node_from_k8s (GFD labels)",
        lambda: node_from_k8s(orjson.loads(node_line)["object"]),
        n,
    )
    await client.close()


if __name__ == "__main__":
    asyncio.run(main())

"""Issue 11's acceptance, as a user would try it on the local control plane: a Deployment
whose replicas must not share a node, and an Indexed Job whose pods each mount a claim of
their own (a generic ephemeral volume of a WaitForFirstConsumer class) and one shared
dataset claim, all with `schedulerName: ai-scheduler`.

Nothing provisions volumes here, so the test creates static PVs first: two `local` PVs per
node with node affinity for the WaitForFirstConsumer class, and one ReadWriteMany PV without
node affinity for the dataset. kube-controller-manager makes the pods (deployment, replica
set, job controllers), the claims (ephemeral-volume-controller) and binds them
(persistentvolume-binder-controller, once gpusched's PreBind has chosen); KWOK runs the pods.
"""

from __future__ import annotations

import io
from typing import Any

import pytest

from gpusched.devcluster import LocalCluster
from gpusched.devcluster.testkit import PAUSE_IMAGE
from gpusched.kube import JSON, Kube, has_condition, wait_for
from gpusched.model import keys
from tests.integration.daemon_support import (
    node_pool,
    placement,
    pool_name,
    pool_node,
    pool_specs,
    running_daemon,
)
from tests.integration.test_controllers import APPS, JOBS, placed_on, watch_pods
from tests.integration.test_daemon_volumes import (
    HOSTNAME,
    PVS,
    claim,
    claims_path,
    local_pv,
    storage,
    storage_class,
)

pytestmark = pytest.mark.integration

A100 = ((8, "A100M80", 96_000, 1_048_576, 8),)
NO_PROVISIONER = "kubernetes.io/no-provisioner"


def shared_pv(name: str, storage_class: str) -> JSON:
    """A ReadWriteMany volume without node affinity (a dataset every node can mount)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "100Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": storage_class,
            "nfs": {"server": "nfs.example.invalid", "path": "/datasets"},
        },
    }


def container(gpus: int) -> JSON:
    limits = {keys.GPU_RESOURCE: str(gpus)} if gpus else {}
    return {
        "name": "main",
        "image": PAUSE_IMAGE,
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": limits},
    }


def spread_deployment(name: str, pool: str, replicas: int) -> JSON:
    where = placement(pool)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "schedulerName": keys.SCHEDULER_NAME,
                    "nodeSelector": where["node_selector"],
                    "tolerations": where["tolerations"],
                    "terminationGracePeriodSeconds": 1,
                    "affinity": {
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "labelSelector": {"matchLabels": {"app": name}},
                                    "topologyKey": HOSTNAME,
                                }
                            ]
                        }
                    },
                    "containers": [container(gpus=1)],
                },
            },
        },
    }


def indexed_job(name: str, pool: str, count: int, scratch_class: str, dataset: str) -> JSON:
    where = placement(pool)
    scratch: dict[str, Any] = {
        "name": "scratch",
        "ephemeral": {
            "volumeClaimTemplate": {
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": scratch_class,
                    "resources": {"requests": {"storage": "5Gi"}},
                }
            }
        },
    }
    main = container(gpus=1)
    main["volumeMounts"] = [
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "data", "mountPath": "/data", "readOnly": True},
    ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": count,
            "parallelism": count,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "schedulerName": keys.SCHEDULER_NAME,
                    "nodeSelector": where["node_selector"],
                    "tolerations": where["tolerations"],
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "volumes": [
                        scratch,
                        {"name": "data", "persistentVolumeClaim": {"claimName": dataset}},
                    ],
                    "containers": [main],
                },
            },
        },
    }


def pv_node(pv: JSON) -> str:
    terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    value: str = terms[0]["matchExpressions"][0]["values"][0]
    return value


async def test_spread_deployment_and_indexed_job_with_claims_run(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    specs = pool_specs(pool, 4, shapes=A100)
    nodes = [pool_node(s, pool) for s in specs]
    names = [s.name for s in specs]
    wffc, immediate = f"wffc-{pool}", f"immediate-{pool}"
    local = [
        local_pv(f"{pool}-scratch-{n}-{k}", n, wffc, size="10Gi") for n in names for k in range(2)
    ]
    dataset_pv = shared_pv(f"{pool}-dataset", immediate)
    classes = [
        storage_class(wffc, NO_PROVISIONER, "WaitForFirstConsumer"),
        storage_class(immediate, NO_PROVISIONER, "Immediate"),
    ]
    claims = claims_path(namespace)
    stream = io.StringIO()
    async with (
        node_pool(kube, nodes),
        storage(kube, classes, [*local, dataset_pv]),
        running_daemon(cluster.kubeconfig, stream),
    ):
        await kube.post(claims, claim("dataset", immediate, size="50Gi", modes=("ReadWriteMany",)))
        await kube.post(APPS.format(namespace=namespace), spread_deployment("infer", pool, 3))
        await kube.post(
            JOBS.format(namespace=namespace), indexed_job("train", pool, 8, wffc, "dataset")
        )

        serving = await watch_pods(kube, namespace, "app=infer", placed_on(set(names), 3))
        # Required anti-affinity on the hostname: three replicas, three nodes.
        assert len({p["spec"]["nodeName"] for p in serving.values()}) == 3

        training = await watch_pods(
            kube,
            namespace,
            "app=train",
            placed_on(set(names), 8, ("Running", "Succeeded")),
            timeout=120.0,
        )
        done = await wait_for(
            kube,
            JOBS.format(namespace=namespace),
            "train",
            lambda j: has_condition(j, "Complete"),
            what="the Indexed Job to complete",
        )
        assert done["status"]["succeeded"] == 8
        indexes = {
            p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
            for p in training.values()
        }
        assert indexes == {str(i) for i in range(8)}

        # Each pod's scratch claim is bound to a local PV on the pod's own node, no PV
        # twice; the dataset claim to the shared PV.
        listing = await kube.get(claims)
        by_name = {c["metadata"]["name"]: c for c in listing["items"]}
        pvs = {pv["metadata"]["name"]: pv for pv in (await kube.get(PVS))["items"]}
        used: list[str] = []
        for name, pod in training.items():
            scratch = by_name[f"{name}-scratch"]
            assert scratch["status"]["phase"] == "Bound", scratch["status"]
            volume = scratch["spec"]["volumeName"]
            assert pv_node(pvs[volume]) == pod["spec"]["nodeName"], (name, volume)
            used.append(volume)
        assert len(set(used)) == 8
        dataset = by_name["dataset"]
        assert dataset["status"]["phase"] == "Bound"
        assert dataset["spec"]["volumeName"] == dataset_pv["metadata"]["name"]

        for path, name in ((APPS, "infer"), (JOBS, "train")):
            await kube.delete(
                f"{path.format(namespace=namespace)}/{name}",
                query=[("propagationPolicy", "Background")],
            )

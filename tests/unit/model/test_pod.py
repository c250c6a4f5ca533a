"""Pod parsing: Kubernetes' request arithmetic and the gpusched annotations."""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.model import keys
from gpusched.model.pod import (
    MAX_REQUEST,
    Gang,
    GangAPI,
    GpuKind,
    HostPort,
    NVLink,
    parse_gpu_ids,
    pod_from_k8s,
)
from tests.builders import fuzz_settings, raw_pods

GI = 2**30


def pod(
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u1",
            "annotations": annotations or {},
            "labels": labels or {},
        },
        "spec": {"containers": containers or [], "initContainers": init or [], **spec},
    }


def c(
    cpu: str | None = None,
    mem: str | None = None,
    gpu: int | None = None,
    *,
    limits_only: bool = False,
    restart: str | None = None,
) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if cpu:
        res["cpu"] = cpu
    if mem:
        res["memory"] = mem
    if gpu is not None:
        res[keys.GPU_RESOURCE] = str(gpu)
    out: dict[str, Any] = {"name": "c", "resources": {"limits" if limits_only else "requests": res}}
    if restart:
        out["restartPolicy"] = restart
    return out


def test_containers_are_summed() -> None:
    p = pod_from_k8s(pod([c("500m", "1Gi"), c("250m", "512Mi")]))
    assert p.request.cpu_milli == 750
    assert p.request.memory_bytes == GI + GI // 2


def test_init_container_max_is_taken() -> None:
    p = pod_from_k8s(pod([c("500m", "1Gi")], init=[c("2", "256Mi"), c("100m", "4Gi")]))
    assert p.request.cpu_milli == 2000
    assert p.request.memory_bytes == 4 * GI


def test_sidecar_init_containers_add_to_the_sum_and_run_beside_later_inits() -> None:
    # Sidecar (restartPolicy Always) 1 CPU; the ordinary init after it needs 2 CPU while
    # the sidecar runs: 3 CPU peak; steady state 1 (sidecar) + 0.5 (app) = 1.5.
    p = pod_from_k8s(pod([c("500m")], init=[c("1", restart="Always"), c("2")]))
    assert p.request.cpu_milli == 3000
    p2 = pod_from_k8s(pod([c("2500m")], init=[c("1", restart="Always"), c("2")]))
    assert p2.request.cpu_milli == 3500


def test_overhead_is_added() -> None:
    p = pod_from_k8s(pod([c("1", "1Gi")], overhead={"cpu": "250m", "memory": "128Mi"}))
    assert p.request.cpu_milli == 1250
    assert p.request.memory_bytes == GI + 128 * 2**20


def test_limits_default_requests() -> None:
    p = pod_from_k8s(pod([c("2", "2Gi", gpu=4, limits_only=True)]))
    assert (p.request.cpu_milli, p.request.gpu_cards) == (2000, 4)
    assert p.request.kind is GpuKind.WHOLE
    assert p.request.gpu_milli_total == 4000


def test_pod_level_resources_replace_container_sum() -> None:
    p = pod_from_k8s(pod([c("1", "1Gi")], resources={"requests": {"cpu": "3"}}))
    assert p.request.cpu_milli == 3000
    assert p.request.memory_bytes == GI


def test_shared_gpu_annotations() -> None:
    p = pod_from_k8s(
        pod(
            [c("1")],
            annotations={
                keys.GPU_MILLI: "250",
                keys.GPU_MEMORY_MIB: "20480",
                keys.GPU_MODEL: "V100M16|V100M32",
                keys.NVLINK: "preferred",
            },
        )
    )
    assert p.errors == ()
    r = p.request
    assert (r.gpu_milli, r.gpu_mem_mib, r.gpu_models, r.nvlink) == (
        250,
        20480,
        ("V100M16", "V100M32"),
        NVLink.PREFERRED,
    )
    assert r.kind is GpuKind.SHARED


@pytest.mark.parametrize(
    ("annotations", "fragment"),
    [
        ({keys.GPU_MILLI: "abc"}, "gpusched.io/gpu-milli='abc' is not an integer"),
        ({keys.GPU_MILLI: "2_50"}, "gpusched.io/gpu-milli='2_50' is not an integer"),
        ({keys.GPU_MILLI: "0"}, "gpusched.io/gpu-milli='0' is out of range (1-1000)"),
        ({keys.GPU_MILLI: "1001"}, "out of range"),
        ({keys.GPU_MEMORY_MIB: "-5"}, "gpusched.io/gpu-memory-mib='-5' is out of range"),
        ({keys.GPU_MODEL: "A100||H100"}, "gpusched.io/gpu-model='A100||H100'"),
        (
            {keys.NVLINK: "always"},
            "gpusched.io/nvlink='always' must be required, preferred or none",
        ),
        ({keys.GANG_NAME: "g"}, "needs scheduling.ai/gang-total"),
        ({keys.GANG_NAME: "g", keys.GANG_TOTAL: "x"}, "scheduling.ai/gang-total='x'"),
        ({keys.GANG_TOTAL: "3"}, "without scheduling.ai/gang-name"),
        ({keys.PREEMPTIBLE: "maybe"}, "gpusched.io/preemptible='maybe'"),
        ({keys.LAST_CHECKPOINT: "yesterday"}, "not an RFC 3339 time"),
        ({keys.CHECKPOINT_INTERVAL: "0"}, "checkpoint-interval-seconds='0' is out of range"),
        ({keys.GPU_IDS: "0,a"}, "gpusched.io/gpu-ids='0,a'"),
        # Beyond int64 the kernels cannot even take it (numba TypingError, "scheduler error").
        (
            {keys.GPU_MEMORY_MIB: "99999999999999999999999"},
            "gpusched.io/gpu-memory-mib='99999999999999999999999' is out of range",
        ),
        ({keys.GANG_NAME: "g", keys.GANG_TOTAL: "9" * 30}, "gang-total='999"),
        ({keys.CHECKPOINT_INTERVAL: "9" * 30}, "checkpoint-interval-seconds='999"),
        # A typo would otherwise place a GPU pod as a CPU-only pod without a word.
        (
            {"gpusched.io/gpu-mili": "250"},
            "unknown annotation gpusched.io/gpu-mili='250' (did you mean gpusched.io/gpu-milli?)",
        ),
        ({"gpusched.io/tenant": "a"}, "gpusched.io/tenant is a Namespace label"),
    ],
)
def test_malformed_annotations_become_errors_naming_key_and_value(
    annotations: dict[str, str], fragment: str
) -> None:
    p = pod_from_k8s(pod([c("1")], annotations=annotations))
    assert any(fragment in e for e in p.errors), p.errors


def test_share_and_whole_cards_together_is_an_error() -> None:
    p = pod_from_k8s(pod([c("1", gpu=1)], annotations={keys.GPU_MILLI: "500"}))
    assert any("gpu-milli='500'" in e and "use one or the other" in e for e in p.errors)
    assert p.request.gpu_milli == 0


def test_whole_cards_with_a_memory_floor() -> None:
    p = pod_from_k8s(pod([c("1", gpu=2)], annotations={keys.GPU_MEMORY_MIB: "81920"}))
    assert p.errors == ()
    assert (p.request.gpu_cards, p.request.gpu_mem_mib, p.request.kind) == (2, 81920, GpuKind.WHOLE)


def test_malformed_quantity_is_an_error_not_an_exception() -> None:
    p = pod_from_k8s(pod([c("lots")]))
    assert any("spec.containers[0].resources['cpu']" in e for e in p.errors)


def test_gang_and_identity() -> None:
    p = pod_from_k8s(
        pod([c("1")], labels={keys.POD_GROUP_LABEL: "pg1", keys.TENANT_LABEL: "team-a"})
    )
    assert p.gang is not None and p.gang.name == "ns/pg1" and p.gang.min_member == 0
    assert p.job_id == "ns/pg1"
    # The label does not make a tenant: only the Namespace's does (framework/tenancy.py).
    assert not hasattr(p, "tenant")
    q = pod_from_k8s(
        pod(
            [c("1")],
            annotations={keys.GANG_NAME: "g", keys.GANG_TOTAL: "4"},
            labels={keys.JOB_ID_LABEL: "job-7"},
        )
    )
    assert q.gang is not None and q.gang.min_member == 4
    assert q.job_id == "job-7"
    assert (p.gang.api, q.gang.api) == (GangAPI.COSCHEDULING, GangAPI.ANNOTATIONS)


def test_upstream_scheduling_group_names_a_gang() -> None:
    raw = pod([c("1")])
    raw["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    p = pod_from_k8s(raw)
    assert p.errors == ()
    assert p.gang == Gang("ns/train", 0, GangAPI.WORKLOAD)
    assert p.job_id == "ns/train"


@pytest.mark.parametrize("group", [{}, {"podGroupName": ""}, "train", {"podGroupName": 7}])
def test_malformed_scheduling_group_is_an_error(group: object) -> None:
    raw = pod([c("1")])
    raw["spec"]["schedulingGroup"] = group
    p = pod_from_k8s(raw)
    assert p.gang is None
    assert any("spec.schedulingGroup=" in e and "podGroupName" in e for e in p.errors), p.errors


def test_a_pod_in_two_gang_apis_is_an_error_naming_both() -> None:
    raw = pod([c("1")], labels={keys.POD_GROUP_LABEL: "pg1"})
    raw["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    p = pod_from_k8s(raw)
    assert p.gang is None
    assert p.errors == (
        "spec.schedulingGroup.podGroupName='train' (scheduling.k8s.io/v1alpha2 PodGroup) and"
        " label scheduling.x-k8s.io/pod-group='pg1' (scheduling.x-k8s.io/v1alpha1 PodGroup)"
        " each put the pod in a gang: use one of them",
    )


def test_huge_values_are_rejected_before_they_reach_the_kernels() -> None:
    p = pod_from_k8s(pod([c("1")], annotations={keys.GPU_MEMORY_MIB: str(2**63)}))
    assert p.request.gpu_mem_mib == 0 and p.errors


def test_other_prefixes_and_known_keys_are_not_flagged() -> None:
    ann = {
        keys.GPU_MILLI: "250",
        keys.GPU_IDS: "0",
        keys.GPU_MILLI_ASSIGNED: "250",
        "example.com/anything": "x",
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
    }
    assert pod_from_k8s(pod([c("1")], annotations=ann)).errors == ()


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("\u00b2", "is not a card index"),  # '²': str.isdigit() is True, int() raises
        ("\u0661", "is not a card index"),  # Arabic-Indic one: int() would take it as 1
        ("1_0", "is not a card index"),
        ("100", "is not a card index"),  # at most 64 cards a node: two digits
        (",".join(["0"] * 65), "more than 64"),
        ("1,1", "appears twice"),
    ],
)
def test_gpu_ids_are_plain_ascii_card_indices(raw: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_gpu_ids(raw)
    assert parse_gpu_ids("0, 7,63") == (0, 7, 63)


# -- in-place resize: what Kubernetes charges (PodRequests with status resources) ----------


def running(
    spec_pod: dict[str, Any],
    statuses: dict[str, dict[str, Any]],
    *,
    init_statuses: dict[str, dict[str, Any]] | None = None,
    **status: Any,
) -> dict[str, Any]:
    """`spec_pod` with a status: container name -> its status' resources/allocatedResources."""

    def cs(name: str, fields: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "ready": True, **fields}

    spec_pod["status"] = {
        "phase": "Running",
        "containerStatuses": [cs(n, f) for n, f in statuses.items()],
        "initContainerStatuses": [cs(n, f) for n, f in (init_statuses or {}).items()],
        **status,
    }
    return spec_pod


def named(name: str, container: dict[str, Any]) -> dict[str, Any]:
    return {**container, "name": name}


def reported(cpu: str, mem: str | None = None, allocated: str | None = None) -> dict[str, Any]:
    """A container status whose kubelet reports `cpu` (and `mem`) as running requests."""
    requests = {"cpu": cpu, **({"memory": mem} if mem else {})}
    out: dict[str, Any] = {"resources": {"requests": requests}}
    if allocated is not None:
        out["allocatedResources"] = {"cpu": allocated}
    return out


def test_a_resize_down_in_progress_still_charges_what_the_container_runs_with() -> None:
    # Spec lowered to 1 CPU / 1 Gi; the kubelet still runs it with 4 CPU / 8 Gi.
    p = pod_from_k8s(running(pod([named("a", c("1", "1Gi"))]), {"a": reported("4", "8Gi")}))
    assert (p.request.cpu_milli, p.request.memory_bytes) == (4000, 8 * GI)
    assert p.errors == ()


def test_a_resize_up_charges_the_new_spec_before_the_kubelet_applies_it() -> None:
    p = pod_from_k8s(running(pod([named("a", c("4"))]), {"a": reported("1", allocated="1")}))
    assert p.request.cpu_milli == 4000


def test_allocated_resources_count_when_above_spec_and_status() -> None:
    p = pod_from_k8s(running(pod([named("a", c("1"))]), {"a": reported("1", allocated="3")}))
    assert p.request.cpu_milli == 3000


@pytest.mark.parametrize(
    "status",
    [
        {"conditions": [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]},
        {"resize": "Infeasible"},  # before 1.33
    ],
)
def test_an_infeasible_resize_leaves_the_spec_out(status: dict[str, Any]) -> None:
    # Spec asks 16 CPU the node cannot give: the pod keeps running with 2.
    p = pod_from_k8s(
        running(pod([named("a", c("16")), named("b", c("1"))]), {"a": reported("2")}, **status)
    )
    assert p.request.cpu_milli == 3000  # 2 (a, status only) + 1 (b, no status: its spec)


def test_a_deferred_resize_still_counts_the_spec() -> None:
    deferred = [{"type": "PodResizePending", "status": "True", "reason": "Deferred"}]
    p = pod_from_k8s(running(pod([named("a", c("16"))]), {"a": reported("2")}, conditions=deferred))
    assert p.request.cpu_milli == 16_000


def test_a_status_without_resources_is_ignored_like_kubernetes_does() -> None:
    # kube reads a container's status only when `resources` is set (cs.Resources != nil).
    p = pod_from_k8s(
        running(pod([named("a", c("1"))]), {"a": {"allocatedResources": {"cpu": "9"}}})
    )
    assert p.request.cpu_milli == 1000


def test_sidecar_status_counts_and_an_ordinary_init_containers_does_not() -> None:
    p = pod_from_k8s(
        running(
            pod(
                [named("app", c("1"))],
                init=[named("side", c("1", restart="Always")), named("init", c("500m"))],
            ),
            {"app": reported("1")},
            init_statuses={"side": reported("3"), "init": reported("8")},
        )
    )
    # app 1 + sidecar resized to 3 = 4; the init container ran with the sidecar: 0.5 + 3.
    assert p.request.cpu_milli == 4000


def test_pod_level_requests_and_overhead_apply_after_the_containers_status() -> None:
    p = pod_from_k8s(
        running(
            pod(
                [named("a", c("1", "1Gi"))],
                resources={"requests": {"cpu": "2"}},
                overhead={"cpu": "100m", "memory": "64Mi"},
            ),
            {"a": reported("6", "4Gi")},
        )
    )
    assert p.request.cpu_milli == 2100  # pod-level cpu replaces the containers' 6
    assert p.request.memory_bytes == 4 * GI + 64 * 2**20  # memory from the status


def test_the_gpu_count_stays_what_the_spec_asks() -> None:
    # Extended resources are not resizable: a status echoing them changes nothing.
    status = {"resources": {"requests": {"cpu": "1", keys.GPU_RESOURCE: "2"}}}
    p = pod_from_k8s(running(pod([named("a", c("1", gpu=2))]), {"a": status}))
    assert p.request.gpu_cards == 2


@pytest.mark.parametrize(
    "status",
    [
        "Running",
        {"containerStatuses": "a"},
        {"containerStatuses": [None, 3, {"name": "a", "resources": "x"}]},
        {"containerStatuses": [{"name": "a", "resources": {"requests": ["x"]}}]},
        {"conditions": [None], "containerStatuses": [{"name": "a", "resources": {}}]},
    ],
)
def test_a_malformed_status_never_raises(status: Any) -> None:
    raw = pod([named("a", c("1"))])
    raw["status"] = status
    assert pod_from_k8s(raw).request.cpu_milli == 1000


def test_a_malformed_status_quantity_is_an_error_naming_it() -> None:
    p = pod_from_k8s(running(pod([named("a", c("1"))]), {"a": reported("lots")}))
    assert any("status of spec.containers[0].resources.requests['cpu']" in e for e in p.errors)
    assert p.request.cpu_milli == 1000


def test_a_request_beyond_int64_is_clamped_and_reported() -> None:
    # A pod bound directly (spec.nodeName) with memory 1e30 raised OverflowError in the
    # snapshot's int64 columns.
    p = pod_from_k8s(pod([named("a", c("1", "1e30"))]))
    assert p.request.memory_bytes == MAX_REQUEST
    assert any("resources['memory']: quantity '1e30' is out of range" in e for e in p.errors)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(
    spec=st.dictionaries(
        st.sampled_from(
            [
                "containers",
                "initContainers",
                "tolerations",
                "resources",
                "overhead",
                "priority",
                "nodeName",
                "nodeSelector",
                "affinity",
                "schedulerName",
            ]
        ),
        _JSON,
    ),
    status=_JSON,
    annotations=st.dictionaries(st.sampled_from(keys.POD_ANNOTATIONS), st.text(max_size=8)),
)
@settings(max_examples=300, deadline=None)
def test_any_json_the_watch_could_deliver_parses_without_raising(
    spec: dict[str, Any], status: Any, annotations: dict[str, str]
) -> None:
    raw = pod([named("a", c("1"))], annotations=annotations)
    raw["spec"].update(spec)
    raw["status"] = status
    p = pod_from_k8s(raw)
    assert p.uid == "u1" and p.request.cpu_milli >= 0
    assert isinstance(p.node_selector, dict) and isinstance(p.affinity, dict)


@pytest.mark.parametrize("field", ["tolerations", "nodeSelector", "affinity"])
def test_a_scalar_where_a_list_or_map_belongs_is_ignored(field: str) -> None:
    raw = pod([c("1")])
    raw["spec"][field] = 5  # raised TypeError: 'int' object is not iterable
    p = pod_from_k8s(raw)
    assert (p.tolerations, p.node_selector, p.affinity) == ((), {}, {})


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ("1e999999999", "exponent 999999999 is out of range"),  # raised decimal.Overflow
        ("\u0663", "is not a Kubernetes quantity"),  # was 3 CPUs
    ],
)
def test_a_quantity_the_grammar_refuses_is_a_pod_error_naming_the_field(
    raw: str, said: str
) -> None:
    p = pod_from_k8s(pod([named("a", c(raw))]))
    assert any(e.startswith("spec.containers[0].resources['cpu']") and said in e for e in p.errors)


# Every error names where it comes from: an annotation, a label, a spec or status field.
_FIELD_PREFIXES = (
    "annotation ",
    "label ",
    "unknown annotation ",
    "spec.",
    "status of spec.",
    "request ",
)


@given(raw=raw_pods(node_names=("a",)) | raw_pods())
@fuzz_settings(120)
def test_any_pod_the_watch_could_deliver_parses_with_bounded_requests_and_named_errors(
    raw: dict[str, Any],
) -> None:
    p = pod_from_k8s(raw)  # never raises
    r = p.request
    for value in (r.cpu_milli, r.memory_bytes, r.gpu_cards):
        assert 0 <= value <= MAX_REQUEST
    assert 0 <= r.gpu_milli <= 1000 and 0 <= r.gpu_mem_mib < 2**31
    assert all(0 <= i <= 99 for i in p.gpu_ids) and len(set(p.gpu_ids)) == len(p.gpu_ids)
    assert isinstance(p.node_selector, dict) and isinstance(p.affinity, dict)
    assert isinstance(p.priority, int) and isinstance(p.tolerations, tuple)
    for error in p.errors:
        assert error.startswith(_FIELD_PREFIXES) or " is a label, not an annotation" in error, error


def test_scheduling_gates_are_read_by_name() -> None:
    p = pod_from_k8s(pod(schedulingGates=[{"name": "a.io/x"}, {"name": "b.io/y"}]))
    assert p.scheduling_gates == ("a.io/x", "b.io/y")
    assert pod_from_k8s(pod()).scheduling_gates == ()


def test_host_ports_of_containers_and_sidecars_with_kube_defaults() -> None:
    main = {**c("1"), "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 9}]}
    udp = {**c("1"), "ports": [{"hostPort": 53, "hostIP": "10.0.0.1", "protocol": "UDP"}]}
    sidecar = {**c("1", restart="Always"), "ports": [{"hostPort": 9100}]}
    plain_init = {**c("1"), "ports": [{"hostPort": 7000}]}  # not running: not held
    p = pod_from_k8s(pod([main, udp], [plain_init, sidecar]))
    assert p.host_ports == (
        HostPort("0.0.0.0", "TCP", 9100),
        HostPort("0.0.0.0", "TCP", 8080),
        HostPort("10.0.0.1", "UDP", 53),
    )


def test_other_resources_follow_pod_requests_with_init_sidecars_and_overhead() -> None:
    """Extended resources, ephemeral-storage and hugepages as PodRequests sums them: regular
    containers and sidecars added, an init container next to the sidecars started before it,
    the maximum of the two, overhead on top; zero requests dropped, cpu/memory/GPU not here."""
    main = {
        "name": "main",
        "resources": {
            "requests": {"rdma/hca": "1", "ephemeral-storage": "1Gi", "example.com/zero": "0"},
            "limits": {"rdma/hca": "1", "hugepages-2Mi": "4Mi", keys.GPU_RESOURCE: "1"},
        },
    }
    sidecar = {
        "name": "side",
        "restartPolicy": "Always",
        "resources": {"requests": {"rdma/hca": "1", "ephemeral-storage": "512Mi"}},
    }
    init = {"name": "init", "resources": {"requests": {"rdma/hca": "3"}}}
    p = pod_from_k8s(pod([main], [sidecar, init], overhead={"ephemeral-storage": "1Mi"}))
    assert p.errors == ()
    assert p.request.gpu_cards == 1
    assert dict(p.request.other) == {
        "ephemeral-storage": GI + 512 * 2**20 + 2**20,
        "hugepages-2Mi": 4 * 2**20,
        # the init container runs next to the sidecar: 3 + 1 > 1 + 1
        "rdma/hca": 4,
    }
    assert [n for n, _ in p.request.other] == sorted(n for n, _ in p.request.other)
    assert pod_from_k8s(pod([c("1", "1Gi")])).request.other == ()


def test_preemption_policy_and_start_time() -> None:
    p = pod_from_k8s(pod([c("1")]))
    assert (p.preemption_policy, p.start_time, p.errors) == ("PreemptLowerPriority", 0.0, ())
    raw = pod([c("1")], preemptionPolicy="Never")
    raw["status"] = {"startTime": "1970-01-01T01:00:00Z", "phase": "Running"}
    p = pod_from_k8s(raw)
    assert (p.preemption_policy, p.start_time) == ("Never", 3600.0)
    bad = pod_from_k8s(pod([c("1")], preemptionPolicy="Sometimes"))
    assert bad.preemption_policy == "PreemptLowerPriority"
    assert bad.errors == (
        "spec.preemptionPolicy='Sometimes' must be PreemptLowerPriority or Never",
    )

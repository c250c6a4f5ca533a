"""Pod requests as the scheduler sees them, parsed from a Kubernetes pod dict.

Requests follow Kubernetes' own arithmetic (component-helpers/resource.PodRequests with
UseStatusResources, what kube-scheduler charges since in-place resize): regular containers
are summed, sidecar (restartable) init containers add to that sum, each ordinary init
container runs alone next to the sidecars started before it, the pod needs the maximum of
the two; pod-level resources (spec.resources.requests), when given, replace that for the
resources they name (cpu, memory); spec.overhead is added last. A regular or sidecar
container whose status reports `resources` is charged, per resource, the maximum of its spec
requests, status.containerStatuses[].resources.requests and .allocatedResources, the spec
left out while the resize is Infeasible (condition PodResizePending with reason Infeasible
since 1.33, status.resize "Infeasible" before): a resize the kubelet has not finished or
cannot do still holds what the node admitted. The same rule covers every resource the model
reads (cpu, memory, nvidia.com/gpu and the other resources kept in `PodRequest.other`:
extended resources, ephemeral-storage, hugepages-*; those cannot be resized, the max keeps
them as they are).

Malformed gpusched annotations never raise: they are collected in `PodInfo.errors`, each
naming the annotation and the value, and the framework turns them into an
UnschedulableAndUnresolvable status (the pod stays pending with an Event that says why).
"""

from __future__ import annotations

import difflib
import enum
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpusched.model import keys
from gpusched.model.dra import PodClaim
from gpusched.model.gpu_models import canonical_models
from gpusched.model.node import FULL_CARD_MILLI
from gpusched.model.quantity import QuantityError, QuantityRangeError, to_int, to_milli
from gpusched.model.volume import PodVolume, pod_volumes


class NVLink(enum.IntEnum):
    NONE = 0
    PREFERRED = 1
    REQUIRED = 2


class GpuKind(enum.Enum):
    NONE = "cpu"
    WHOLE = "whole"
    SHARED = "shared"


@dataclass(frozen=True, slots=True)
class PodRequest:
    cpu_milli: int = 0
    memory_bytes: int = 0
    gpu_cards: int = 0  # whole cards (nvidia.com/gpu)
    gpu_milli: int = 0  # share of one card for shared pods, 1..1000
    # Shared pods: MiB of one card (0 = proportional to the share). Whole-card pods: the
    # least memory each card must have ("8 cards of at least 80 GB").
    gpu_mem_mib: int = 0
    # Any of these models (canonical names, model/gpu_models.py); empty = any model.
    gpu_models: tuple[str, ...] = ()
    nvlink: NVLink = NVLink.NONE
    # Every other resource requested (> 0), sorted by name, in base units: extended
    # resources (rdma/hca, nvidia.com/mig-1g.10gb) as counts, ephemeral-storage and
    # hugepages-* in bytes. NodeResourcesFit checks them against the node's allocatable.
    other: tuple[tuple[str, int], ...] = ()

    @property
    def kind(self) -> GpuKind:
        if self.gpu_cards > 0:
            return GpuKind.WHOLE
        if self.gpu_milli > 0 or self.gpu_mem_mib > 0:
            return GpuKind.SHARED
        return GpuKind.NONE

    @property
    def gpu_milli_total(self) -> int:
        """GPU demand in milli-GPU (the FGD paper's unit)."""
        return self.gpu_cards * FULL_CARD_MILLI if self.gpu_cards else self.gpu_milli


class GangAPI(enum.Enum):
    """Which API put the pod in a gang: where its minimum and status live."""

    # Upstream Kubernetes 1.36: spec.schedulingGroup.podGroupName names a PodGroup of
    # scheduling.k8s.io/v1alpha2 (the job controller makes one for an Indexed Job).
    WORKLOAD = "scheduling.k8s.io/v1alpha2 PodGroup"
    # scheduler-plugins' Coscheduling: label scheduling.x-k8s.io/pod-group.
    COSCHEDULING = "scheduling.x-k8s.io/v1alpha1 PodGroup"
    # scheduling.ai/gang-name + gang-total: an implicit group, no object.
    ANNOTATIONS = "scheduling.ai/gang-name annotation"


@dataclass(frozen=True, slots=True)
class Gang:
    name: str  # namespaced key "ns/name"
    min_member: int  # 0: taken from the PodGroup object
    api: GangAPI


@dataclass(frozen=True, slots=True)
class HostPort:
    """A host port a container takes, as kube-scheduler's HostPortInfo keys it: the host IP
    ("0.0.0.0", the default, means every address), the protocol (default TCP), the port."""

    ip: str
    protocol: str
    port: int


WILDCARD_IP = "0.0.0.0"


@dataclass(frozen=True, slots=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    request: PodRequest
    scheduler_name: str = "default-scheduler"
    node_name: str = ""
    priority: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: Mapping[str, Any] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    created: float = 0.0  # unix seconds, for QueueSort ties
    gang: Gang | None = None
    job_id: str = ""  # network locality groups a job's pods
    # No tenant here: a pod's tenant is its Namespace's (framework/tenancy.py), never a
    # label the pod's owner could write.
    preemptible: bool = True
    gpu_ids: tuple[int, ...] = ()  # cards of a bound pod, from gpusched.io/gpu-ids
    phase: str = "Pending"
    deleting: bool = False
    errors: tuple[str, ...] = ()
    # spec.schedulingGates' names: a gated pod is not attempted (SchedulingGates PreEnqueue).
    scheduling_gates: tuple[str, ...] = ()
    # spec.resourceClaims names (Dynamic Resource Allocation)
    resource_claims: tuple[str, ...] = ()
    # The same entries resolved to the ResourceClaims they mean (status.resourceClaimStatuses
    # for the template ones), in spec order.
    pod_claims: tuple[PodClaim, ...] = ()
    # Host ports the pod takes on its node (NodePorts), kube's GetHostPorts.
    host_ports: tuple[HostPort, ...] = ()
    # Claims (persistentVolumeClaim, generic ephemeral) and in-tree disks the volume plugins
    # read (model/volume.py); other volume types are left out.
    volumes: tuple[PodVolume, ...] = ()
    # spec.topologySpreadConstraints as raw dicts (PodTopologySpread parses and validates).
    topology_spread_constraints: tuple[Mapping[str, Any], ...] = ()
    # The controller ownerReference (controller: true) as (kind, uid), ("", "") without
    # one: PodTopologySpread's default constraints apply to pods of a ReplicaSet,
    # StatefulSet or ReplicationController.
    controller: tuple[str, str] = ("", "")
    # Names of every ownerReference, sorted: a PodGroup's status.occupiedBy names them.
    owners: tuple[str, ...] = ()
    # The GPU request was made from the pod's ResourceClaims for this scheduling cycle
    # (DynamicResources.expand): its cards come from DRA devices, through the allocator.
    gpu_from_claims: bool = False
    # spec.preemptionPolicy: "PreemptLowerPriority" (the default) or "Never" (the pod never
    # preempts others).
    preemption_policy: str = "PreemptLowerPriority"
    # status.startTime (unix seconds, 0.0 while the kubelet has not started the pod): what
    # preemption counts a victim's lost work from.
    start_time: float = 0.0
    # status.nominatedNodeName: where a preemption made room for the pod (this or an earlier
    # leader's); "" without one.
    nominated_node: str = ""

    @property
    def job_key(self) -> str:
        """The job across the cluster: namespace/job id ("" without one). A job id is only
        unique in its namespace: two tenants' "train-1" jobs must not pull each other's pods
        into their racks."""
        return f"{self.namespace}/{self.job_id}" if self.job_id else ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


def _resource_list(obj: Any) -> Mapping[str, Any]:
    return obj if isinstance(obj, dict) else {}


# A request beyond this is no node's (2^62 milli-CPU, 4 EiB); above int64 the snapshot's
# columns would raise OverflowError mid-update.
MAX_REQUEST = 2**62


@functools.lru_cache(maxsize=1024)
def _quantity(raw: str, milli: bool) -> int:
    """A quantity string parsed once: a fleet repeats a few dozen ("4", "16Gi", "100m"), and
    the Decimal arithmetic is most of a pod's parse. Errors are not cached (raised)."""
    return to_milli(raw) if milli else to_int(raw)


def _parse(name: str, raw: Any, errors: list[str], where: str) -> int | None:
    """The quantity in the model's unit; None (and an error naming `where`) if malformed. A
    quantity beyond int64 is reported and clamped, so a bound pod is never charged less than
    it asked for."""
    milli = name == "cpu"
    try:
        if isinstance(raw, str):
            return _quantity(raw, milli)
        return to_milli(raw) if milli else to_int(raw)
    except QuantityRangeError as exc:
        errors.append(f"{where}: {exc}")
        return 0 if exc.negative else MAX_REQUEST
    except QuantityError as exc:
        errors.append(f"{where}: {exc}")
        return None


def _requests(
    requests: Mapping[str, Any], errors: list[str], where: str, out: dict[str, int]
) -> dict[str, int]:
    for name, raw in requests.items():
        value = _parse(name, raw, errors, f"{where}[{name!r}]")
        if value is not None:
            out[name] = value
    return out


def _container_requests(c: Mapping[str, Any], errors: list[str], where: str) -> dict[str, int]:
    res = _resource_list(c.get("resources"))
    out: dict[str, int] = {}
    # Kubernetes defaults a missing request to the limit; explicit requests win.
    limits = _resource_list(res.get("limits"))
    if limits:
        _requests(limits, errors, f"{where}.resources", out)
    return _requests(_resource_list(res.get("requests")), errors, f"{where}.resources", out)


def _status_requests(
    spec_reqs: dict[str, int],
    cs: Mapping[str, Any],
    infeasible: bool,
    errors: list[str],
    where: str,
) -> dict[str, int]:
    """determineContainerReqs: max(spec, status resources.requests, allocatedResources), the
    spec left out while the resize is Infeasible."""
    out: dict[str, int] = {} if infeasible else dict(spec_reqs)
    actual = _requests(
        _resource_list(_resource_list(cs.get("resources")).get("requests")),
        errors,
        f"{where}.resources.requests",
        {},
    )
    _max(out, actual)
    allocated = _resource_list(cs.get("allocatedResources"))
    if allocated:
        _max(out, _requests(allocated, errors, f"{where}.allocatedResources", {}))
    return out


def _add(a: dict[str, int], b: Mapping[str, int]) -> None:
    for k, v in b.items():
        a[k] = a.get(k, 0) + v


def _max(a: dict[str, int], b: Mapping[str, int]) -> None:
    for k, v in b.items():
        if k not in a or v > a[k]:
            a[k] = v


def _dicts(items: Any) -> list[Mapping[str, Any]]:
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def resize_infeasible(status: Mapping[str, Any]) -> bool:
    """IsPodResizeInfeasible: the first PodResizePending condition says Infeasible (1.33+),
    or the older status.resize field does."""
    for cond in _dicts(status.get("conditions")):
        if cond.get("type") == "PodResizePending":
            return cond.get("reason") == "Infeasible"
    return status.get("resize") == "Infeasible"


def _statuses(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Container statuses by name that report resources (kube: `cs.Resources != nil`)."""
    out: dict[str, Mapping[str, Any]] = {}
    for field_name in ("containerStatuses", "initContainerStatuses"):
        for cs in _dicts(status.get(field_name)):
            if cs.get("resources") is not None:
                out[str(cs.get("name"))] = cs
    return out


def pod_resource_requests(
    spec: Mapping[str, Any], errors: list[str], status: Mapping[str, Any] | None = None
) -> dict[str, int]:
    """Total requests by resource name (cpu in milli, others in base units), as
    PodRequests(pod, {UseStatusResources: true}) computes them."""
    statuses = _statuses(status) if status else {}
    infeasible = bool(statuses) and status is not None and resize_infeasible(status)
    total: dict[str, int] = {}
    for i, c in enumerate(_dicts(spec.get("containers"))):
        where = f"spec.containers[{i}]"
        req = _container_requests(c, errors, where)
        cs = statuses.get(str(c.get("name"))) if statuses else None
        if cs is not None:
            req = _status_requests(req, cs, infeasible, errors, f"status of {where}")
        _add(total, req)
    sidecars: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for i, c in enumerate(_dicts(spec.get("initContainers"))):
        where = f"spec.initContainers[{i}]"
        req = _container_requests(c, errors, where)
        if c.get("restartPolicy") == "Always":
            # Only sidecars are resized; an ordinary init container's status is ignored.
            cs = statuses.get(str(c.get("name"))) if statuses else None
            if cs is not None:
                req = _status_requests(req, cs, infeasible, errors, f"status of {where}")
            _add(total, req)
            _add(sidecars, req)
            step = dict(sidecars)
        else:
            step = dict(req)
            _add(step, sidecars)
        _max(init_max, step)
    _max(total, init_max)
    pod_level = _resource_list(_resource_list(spec.get("resources")).get("requests"))
    for name in ("cpu", "memory"):
        if name in pod_level:
            value = _parse(name, pod_level[name], errors, f"spec.resources.requests[{name!r}]")
            if value is not None:
                total[name] = value
    overhead = _resource_list(spec.get("overhead"))
    if overhead:
        _add(total, _requests(overhead, errors, "spec.overhead", {}))
    for name, value in total.items():
        if not 0 <= value <= MAX_REQUEST:
            errors.append(f"request {name}={value} is out of range (0-{MAX_REQUEST})")
            total[name] = min(max(value, 0), MAX_REQUEST)
    return total


# Resources the model keeps in their own fields (cpu, memory, nvidia.com/gpu), or that are
# no pod's request (pods); every other one goes to PodRequest.other.
_OWN_RESOURCES = frozenset(("cpu", "memory", "pods", keys.GPU_RESOURCE))


def other_requests(totals: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """The requests `PodRequest.other` keeps: every resource outside the model's own fields
    with a positive amount (kube-scheduler skips a zero request), sorted by name."""
    return tuple(sorted((n, v) for n, v in totals.items() if v > 0 and n not in _OWN_RESOURCES))


_INTEGER = re.compile(r"[+-]?[0-9]+")
_CARD_INDEX = re.compile(r"[0-9]{1,2}")
MAX_CARD_IDS = 64
# No annotation count or size is near this; beyond int64 the kernels cannot take the value.
MAX_ANNOTATION_INT = 2**31 - 1
_OWN_PREFIX = keys.GPU_MILLI.split("/", 1)[0] + "/"
_LABEL_KEYS = (keys.RACK_LABEL, keys.SPINE_LABEL)


def _int_annotation(
    ann: Mapping[str, str], key: str, lo: int, hi: int | None, errors: list[str]
) -> int:
    raw = ann.get(key)
    if raw is None:
        return 0
    text = str(raw).strip()
    # Python's int() also takes "2_50" and "٣": an annotation is plain ASCII digits.
    if not _INTEGER.fullmatch(text):
        errors.append(f"annotation {key}={raw!r} is not an integer")
        return 0
    value = int(text)
    if value < lo or value > (hi if hi is not None else MAX_ANNOTATION_INT):
        bound = f"{lo}-{hi}" if hi is not None else f"{lo}-{MAX_ANNOTATION_INT}"
        errors.append(f"annotation {key}={raw!r} is out of range ({bound})")
        return 0
    return value


def _unknown_annotations(ann: Mapping[str, str], errors: list[str]) -> None:
    """A gpusched.io/ key the parser does not know is a typo (gpu-mili) that would otherwise
    place the pod as if it asked for nothing."""
    for key in ann:
        if not str(key).startswith(_OWN_PREFIX) or key in keys.POD_ANNOTATIONS:
            continue
        if key in _LABEL_KEYS:
            errors.append(f"{key} is a label, not an annotation: set it in metadata.labels")
            continue
        if key == keys.TENANT_LABEL:
            # The tenant is the Namespace's (framework/tenancy.py): a pod cannot choose it.
            errors.append(
                f"{key} is a Namespace label (it names the tenant of every pod in the"
                " namespace), not a pod annotation"
            )
            continue
        close = difflib.get_close_matches(str(key), keys.POD_ANNOTATIONS, n=1)
        hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(keys.POD_ANNOTATIONS)}"
        errors.append(f"unknown annotation {key}={ann[key]!r} ({hint})")


def parse_time(raw: Any) -> float:
    """An RFC 3339 timestamp as unix seconds; 0.0 when absent or malformed."""
    if not isinstance(raw, str) or not raw:
        return 0.0
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def parse_gpu_ids(raw: str) -> tuple[int, ...]:
    """'0,1,3' -> (0, 1, 3); raises ValueError naming the bad part. Strict: a pod owner can
    write this annotation, and str.isdigit() also takes '²' (which int() then refuses) and
    '٣' (which it takes): only ASCII indices 0-99, at most 64 of them."""
    parts = raw.split(",")
    if len(parts) > MAX_CARD_IDS:
        raise ValueError(f"more than {MAX_CARD_IDS} card indices")
    ids: list[int] = []
    for raw_part in parts:
        part = raw_part.strip()
        if not _CARD_INDEX.fullmatch(part):
            raise ValueError(f"{part!r} is not a card index")
        ids.append(int(part))
    if len(set(ids)) != len(ids):
        raise ValueError("a card index appears twice")
    return tuple(ids)


def _scheduling_gates(spec: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(g.get("name", "")) for g in _dicts(spec.get("schedulingGates")))


def _resource_claims(spec: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(c.get("name", "")) for c in _dicts(spec.get("resourceClaims")))


def pod_claims(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    """spec.resourceClaims resolved as resourceclaim.Name does: a resourceClaimName names
    the claim; a resourceClaimTemplateName's claim is the one status.resourceClaimStatuses
    names for the entry ("" while the controller has not made it; an entry whose name is
    null means the pod needs no claim for it). An entry with neither (or both) is an
    error."""
    made: dict[str, str | None] = {}
    for entry in _dicts(status.get("resourceClaimStatuses")):
        name = entry.get("resourceClaimName")
        made[str(entry.get("name", ""))] = name if isinstance(name, str) and name else None
    out: list[PodClaim] = []
    for c in _dicts(spec.get("resourceClaims")):
        name = str(c.get("name", ""))
        claim, template = c.get("resourceClaimName"), c.get("resourceClaimTemplateName")
        if isinstance(claim, str) and claim and template is None:
            out.append(PodClaim(name, claim=claim))
        elif isinstance(template, str) and template and claim is None:
            if name not in made:
                out.append(PodClaim(name, template=template))
            else:
                resolved = made[name]
                out.append(
                    PodClaim(name, claim=resolved or "", template=template, not_needed=not resolved)
                )
        else:
            # Neither (or both): an API this parser does not know (resourceclaim.Name's
            # ErrAPIUnsupported); kept with no claim and no template for the plugin to refuse.
            out.append(PodClaim(name))
    return tuple(out)


def host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """kube's GetHostPorts: the ports with a hostPort > 0 of sidecar (restartPolicy: Always)
    init containers and regular containers, with the empty host IP and protocol defaulted
    (kube-scheduler's HostPortInfo sanitize: 0.0.0.0 and TCP)."""
    out: list[HostPort] = []
    sidecars = [c for c in _dicts(spec.get("initContainers")) if c.get("restartPolicy") == "Always"]
    for c in (*sidecars, *_dicts(spec.get("containers"))):
        for p in _dicts(c.get("ports")):
            port = p.get("hostPort")
            if not isinstance(port, int) or isinstance(port, bool) or port <= 0:
                continue
            out.append(
                HostPort(str(p.get("hostIP") or WILDCARD_IP), str(p.get("protocol") or "TCP"), port)
            )
    return tuple(out)


def controller_ref(meta: Mapping[str, Any]) -> tuple[str, str]:
    """metav1.GetControllerOf: the ownerReference with controller: true, as (kind, uid)."""
    for ref in _dicts(meta.get("ownerReferences")):
        if ref.get("controller") is True:
            return str(ref.get("kind") or ""), str(ref.get("uid") or "")
    return "", ""


def _gang(
    spec: Mapping[str, Any],
    labels: Mapping[str, str],
    ann: Mapping[str, str],
    namespace: str,
    errors: list[str],
) -> Gang | None:
    """The pod's gang from whichever of the three APIs names one; naming groups through two
    APIs is an error (which group's minimum would hold is anyone's guess)."""
    # (gang, the field that named it, as the error names it)
    found: list[tuple[Gang, str]] = []
    raw_group = spec.get("schedulingGroup")
    if raw_group is not None:
        name = raw_group.get("podGroupName") if isinstance(raw_group, Mapping) else None
        if isinstance(name, str) and name.strip():
            gang = Gang(f"{namespace}/{name.strip()}", 0, GangAPI.WORKLOAD)
            found.append((gang, f"spec.schedulingGroup.podGroupName={name!r}"))
        else:
            errors.append(f"spec.schedulingGroup={raw_group!r} must name a PodGroup (podGroupName)")
    pg = labels.get(keys.POD_GROUP_LABEL)
    if pg:
        gang = Gang(f"{namespace}/{pg}", 0, GangAPI.COSCHEDULING)
        found.append((gang, f"label {keys.POD_GROUP_LABEL}={pg!r}"))
    gname = ann.get(keys.GANG_NAME)
    if gname is not None:
        total = _int_annotation(ann, keys.GANG_TOTAL, 1, None, errors)
        if not str(gname).strip():
            errors.append(f"annotation {keys.GANG_NAME}={gname!r} must not be empty")
        elif keys.GANG_TOTAL not in ann:
            errors.append(f"annotation {keys.GANG_NAME} needs {keys.GANG_TOTAL} (the gang size)")
        elif total:
            gang = Gang(f"{namespace}/{str(gname).strip()}", total, GangAPI.ANNOTATIONS)
            found.append((gang, f"annotation {keys.GANG_NAME}={gname!r}"))
    elif keys.GANG_TOTAL in ann:
        errors.append(f"annotation {keys.GANG_TOTAL} without {keys.GANG_NAME}")
    for key in (keys.TOPOLOGY_REQUIRED, keys.TOPOLOGY_PREFERRED):
        tier = ann.get(key)
        if tier is not None and tier not in keys.TOPOLOGY_TIERS:
            errors.append(
                f"annotation {key}={tier!r} must be one of {', '.join(keys.TOPOLOGY_TIERS)}"
            )
    if len(found) > 1:
        named = " and ".join(f"{field} ({g.api.value})" for g, field in found)
        errors.append(f"{named} each put the pod in a gang: use one of them")
        return None
    return found[0][0] if found else None


def pod_from_k8s(obj: Mapping[str, Any]) -> PodInfo:
    meta = _resource_list(obj.get("metadata"))
    spec = _resource_list(obj.get("spec"))
    status = _resource_list(obj.get("status"))
    labels: Mapping[str, str] = _resource_list(meta.get("labels"))
    ann: Mapping[str, str] = _resource_list(meta.get("annotations"))
    namespace = str(meta.get("namespace", "default"))
    errors: list[str] = []
    _unknown_annotations(ann, errors)

    totals = pod_resource_requests(spec, errors, status)
    cards = totals.get(keys.GPU_RESOURCE, 0)
    milli = _int_annotation(ann, keys.GPU_MILLI, 1, FULL_CARD_MILLI, errors)
    gmem = _int_annotation(ann, keys.GPU_MEMORY_MIB, 1, None, errors)
    if cards and milli:
        errors.append(
            f"annotation {keys.GPU_MILLI}={ann.get(keys.GPU_MILLI)!r} asks for a share of one card"
            f" but the pod also requests {cards} whole {keys.GPU_RESOURCE}; use one or the other"
        )
        milli = 0

    models: tuple[str, ...] = ()
    raw_model = ann.get(keys.GPU_MODEL)
    if raw_model is not None:
        parts = tuple(p.strip() for p in str(raw_model).split("|"))
        if not parts or any(not p for p in parts):
            errors.append(
                f"annotation {keys.GPU_MODEL}={raw_model!r} must be models separated by '|'"
            )
        else:
            # Either spelling of a model (`A100M80`, `NVIDIA-A100-SXM4-80GB`) is the same
            # constraint from here on: node cards are interned by the same canonical name.
            models = canonical_models(parts)

    nvlink = NVLink.NONE
    raw_nv = ann.get(keys.NVLINK)
    if raw_nv is not None:
        try:
            nvlink = {
                "required": NVLink.REQUIRED,
                "preferred": NVLink.PREFERRED,
                "none": NVLink.NONE,
            }[str(raw_nv).strip().lower()]
        except KeyError:
            errors.append(
                f"annotation {keys.NVLINK}={raw_nv!r} must be required, preferred or none"
            )

    gang = _gang(spec, labels, ann, namespace, errors)
    claims = pod_claims(spec, status)

    preemptible = True
    raw_pre = ann.get(keys.PREEMPTIBLE)
    if raw_pre is not None:
        if str(raw_pre).lower() not in ("true", "false"):
            errors.append(f"annotation {keys.PREEMPTIBLE}={raw_pre!r} must be true or false")
        else:
            preemptible = str(raw_pre).lower() == "true"
    _int_annotation(ann, keys.CHECKPOINT_INTERVAL, 1, None, errors)
    raw_ckpt = ann.get(keys.LAST_CHECKPOINT)
    if raw_ckpt is not None and parse_time(raw_ckpt) == 0.0:
        errors.append(f"annotation {keys.LAST_CHECKPOINT}={raw_ckpt!r} is not an RFC 3339 time")

    gpu_ids: tuple[int, ...] = ()
    raw_ids = ann.get(keys.GPU_IDS)
    if raw_ids is not None:
        try:
            gpu_ids = parse_gpu_ids(str(raw_ids))
        except ValueError as exc:
            errors.append(f"annotation {keys.GPU_IDS}={raw_ids!r}: {exc}")

    priority = spec.get("priority")
    policy = spec.get("preemptionPolicy")
    if policy is not None and policy not in ("PreemptLowerPriority", "Never"):
        errors.append(f"spec.preemptionPolicy={policy!r} must be PreemptLowerPriority or Never")
        policy = None
    return PodInfo(
        uid=str(meta.get("uid", "")),
        namespace=namespace,
        name=str(meta.get("name", "")),
        request=PodRequest(
            cpu_milli=totals.get("cpu", 0),
            memory_bytes=totals.get("memory", 0),
            gpu_cards=cards,
            gpu_milli=milli,
            gpu_mem_mib=gmem,
            gpu_models=models,
            nvlink=nvlink,
            other=other_requests(totals),
        ),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=str(spec.get("nodeName") or ""),
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        labels=labels,
        annotations=ann,
        node_selector=_resource_list(spec.get("nodeSelector")),
        affinity=_resource_list(spec.get("affinity")),
        tolerations=tuple(_dicts(spec.get("tolerations"))),
        created=parse_time(meta.get("creationTimestamp")),
        gang=gang,
        job_id=str(labels.get(keys.JOB_ID_LABEL) or (gang.name if gang else "")),
        preemptible=preemptible,
        gpu_ids=gpu_ids,
        phase=str(status.get("phase") or "Pending"),
        deleting=meta.get("deletionTimestamp") is not None,
        errors=tuple(errors),
        scheduling_gates=_scheduling_gates(spec),
        resource_claims=_resource_claims(spec),
        pod_claims=claims,
        host_ports=host_ports(spec),
        volumes=pod_volumes(spec, str(meta.get("name", ""))),
        topology_spread_constraints=tuple(_dicts(spec.get("topologySpreadConstraints"))),
        controller=controller_ref(meta),
        owners=tuple(
            sorted(str(r["name"]) for r in _dicts(meta.get("ownerReferences")) if r.get("name"))
        ),
        preemption_policy=str(policy or "PreemptLowerPriority"),
        start_time=parse_time(status.get("startTime")),
        nominated_node=str(status.get("nominatedNodeName") or ""),
    )

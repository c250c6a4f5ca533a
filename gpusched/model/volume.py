"""Storage as the volume plugins see it: a pod's volumes, PersistentVolumeClaims,
PersistentVolumes, StorageClasses and CSINodes, parsed from the API's JSON into slim frozen
objects (the daemon's watches decode each object once; the plugins only read them).

Names and defaults follow the API and k8s.io/component-helpers/storage/volume:
- a claim's class is the beta annotation `volume.beta.kubernetes.io/storage-class` if
  present, else `spec.storageClassName` ("" when neither: GetPersistentVolumeClaimClass);
  the same for a volume (GetPersistentVolumeClass);
- a missing `volumeMode` is Filesystem (CheckVolumeModeMismatches);
- a claim is fully bound once `spec.volumeName` is set and it carries
  `pv.kubernetes.io/bind-completed` (isPVCFullyBound);
- a generic ephemeral volume's claim is named `<pod>-<volume>` and must be controlled by the
  pod (k8s.io/component-helpers/storage/ephemeral).

Malformed fields never raise: they become `errors` on the object (a claim whose selector
cannot be parsed matches no volume and says why).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpusched.model.quantity import QuantityError, to_int
from gpusched.model.selector import LABEL_OPERATORS, NODE_OPERATORS, LabelSelector, Requirement

BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
IMMEDIATE = "Immediate"
FILESYSTEM = "Filesystem"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"
OBJECT_NAME_FIELD = "metadata.name"


def _map(obj: Any, key: str) -> Mapping[str, Any]:
    got = obj.get(key) if isinstance(obj, Mapping) else None
    return got if isinstance(got, Mapping) else {}


def _list(obj: Any, key: str) -> list[Any]:
    got = obj.get(key) if isinstance(obj, Mapping) else None
    return got if isinstance(got, list) else []


def _str(obj: Any, key: str) -> str:
    got = obj.get(key) if isinstance(obj, Mapping) else None
    return got if isinstance(got, str) else ""


def _strings(items: list[Any]) -> tuple[str, ...]:
    return tuple(str(i) for i in items if isinstance(i, str))


def _labels(meta: Mapping[str, Any], key: str) -> Mapping[str, str]:
    return {str(k): str(v) for k, v in _map(meta, key).items() if isinstance(v, str)}


# -- selectors --------------------------------------------------------------------------


def _requirement(raw: Any, where: str, ops: tuple[str, ...], errors: list[str]) -> Requirement:
    # Lenient on purpose (malformed fields never raise): an unknown operator is reported and
    # its Requirement matches nothing, as does a Gt / Lt without one integer bound.
    key = _str(raw, "key")
    op = _str(raw, "operator")
    values = frozenset(_strings(_list(raw, "values")))
    if op not in ops:
        errors.append(f"{where}.operator: Unsupported value: {op!r}")
    elif op in ("In", "NotIn") and not values:
        errors.append(f"{where}.values: Required value: must be specified for {op}")
    return Requirement(key, op, values)


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    labels: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()  # metadata.name only

    def matches(self, labels: Mapping[str, str], name: str) -> bool:
        # component-helpers' MatchNodeSelectorTerms: a term with no requirements matches
        # nothing; every requirement of a term must hold.
        if not self.labels and not self.fields:
            return False
        if not all(r.matches(labels) for r in self.labels):
            return False
        # matchFields supports metadata.name only; any other field matches no node.
        fields = {OBJECT_NAME_FIELD: name}
        return all(r.key == OBJECT_NAME_FIELD and r.matches(fields) for r in self.fields)


def node_selector_matches(
    terms: tuple[NodeSelectorTerm, ...], labels: Mapping[str, str], name: str
) -> bool:
    """Terms are ORed (a volume's required node affinity)."""
    return any(t.matches(labels, name) for t in terms)


def _node_terms(raw: Any, where: str, errors: list[str]) -> tuple[NodeSelectorTerm, ...]:
    terms: list[NodeSelectorTerm] = []
    for i, t in enumerate(_list(raw, "nodeSelectorTerms")):
        here = f"{where}.nodeSelectorTerms[{i}]"
        terms.append(
            NodeSelectorTerm(
                tuple(
                    _requirement(r, f"{here}.matchExpressions[{j}]", NODE_OPERATORS, errors)
                    for j, r in enumerate(_list(t, "matchExpressions"))
                ),
                tuple(
                    _requirement(r, f"{here}.matchFields[{j}]", NODE_OPERATORS, errors)
                    for j, r in enumerate(_list(t, "matchFields"))
                ),
            )
        )
    return tuple(terms)


def _label_selector(raw: Any, where: str, errors: list[str]) -> LabelSelector | None:
    if not isinstance(raw, Mapping):
        return None
    reqs = [
        Requirement(str(k), "In", frozenset((v,)))
        for k, v in _map(raw, "matchLabels").items()
        if isinstance(v, str)
    ]
    reqs.extend(
        _requirement(r, f"{where}.matchExpressions[{j}]", LABEL_OPERATORS, errors)
        for j, r in enumerate(_list(raw, "matchExpressions"))
    )
    return LabelSelector(tuple(reqs))


@dataclass(frozen=True, slots=True)
class TopologyTerm:
    """A StorageClass allowedTopologies term: every (key, values) must match (ANDed)."""

    requirements: tuple[tuple[str, frozenset[str]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) in values for k, values in self.requirements)


def topology_matches(terms: tuple[TopologyTerm, ...], labels: Mapping[str, str]) -> bool:
    """v1helper.MatchTopologySelectorTerms: no terms match every node; terms are ORed."""
    return not terms or any(t.matches(labels) for t in terms)


# -- the pod's volumes ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Disk:
    """An in-tree disk that VolumeRestrictions checks for conflicts on one node: kind is
    gce (pdName), aws (volumeID), iscsi (iqn) or rbd (pool/image, with its monitors)."""

    kind: str
    id: str
    read_only: bool = False
    monitors: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class PodVolume:
    name: str
    claim: str = ""  # the PVC's name: persistentVolumeClaim.claimName, or <pod>-<volume>
    ephemeral: bool = False  # a generic ephemeral volume (its claim made for the pod)
    read_only: bool = False
    disk: Disk | None = None


def _disk(vol: Mapping[str, Any]) -> Disk | None:
    if (g := _map(vol, "gcePersistentDisk")) or "gcePersistentDisk" in vol:
        return Disk("gce", _str(g, "pdName"), g.get("readOnly") is True)
    if (a := _map(vol, "awsElasticBlockStore")) or "awsElasticBlockStore" in vol:
        return Disk("aws", _str(a, "volumeID"), a.get("readOnly") is True)
    if (s := _map(vol, "iscsi")) or "iscsi" in vol:
        return Disk("iscsi", _str(s, "iqn"), s.get("readOnly") is True)
    if (r := _map(vol, "rbd")) or "rbd" in vol:
        # The API defaults pool to "rbd".
        pool = _str(r, "pool") or "rbd"
        return Disk(
            "rbd",
            f"{pool}/{_str(r, 'image')}",
            r.get("readOnly") is True,
            frozenset(_strings(_list(r, "monitors"))),
        )
    return None


def pod_volumes(spec: Mapping[str, Any], pod_name: str) -> tuple[PodVolume, ...]:
    """The volumes the volume plugins read: claims (persistentVolumeClaim, ephemeral) and
    in-tree disks; other volume types (emptyDir, configMap, ...) are left out."""
    out: list[PodVolume] = []
    for vol in _list(spec, "volumes"):
        if not isinstance(vol, Mapping):
            continue
        name = _str(vol, "name")
        if "persistentVolumeClaim" in vol:
            pvc = _map(vol, "persistentVolumeClaim")
            out.append(
                PodVolume(name, _str(pvc, "claimName"), read_only=pvc.get("readOnly") is True)
            )
        elif "ephemeral" in vol:
            out.append(PodVolume(name, f"{pod_name}-{name}", ephemeral=True))
        elif (disk := _disk(vol)) is not None:
            out.append(PodVolume(name, disk=disk, read_only=disk.read_only))
    return tuple(out)


# -- PersistentVolumeClaim --------------------------------------------------------------


def _storage(raw: Any, where: str, errors: list[str]) -> int:
    value = raw.get("storage") if isinstance(raw, Mapping) else None
    if value is None:
        return 0
    try:
        return to_int(value)
    except QuantityError as exc:
        errors.append(f"{where}.storage: {exc}")
        return 0


def _controller_uid(meta: Mapping[str, Any]) -> str:
    for ref in _list(meta, "ownerReferences"):
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return _str(ref, "uid")
    return ""


@dataclass(frozen=True, slots=True)
class Claim:
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    storage_class: str = ""
    volume_name: str = ""
    access_modes: tuple[str, ...] = ()
    request: int = 0  # bytes of spec.resources.requests.storage
    volume_mode: str = FILESYSTEM
    selector: LabelSelector | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    phase: str = "Pending"
    deleting: bool = False
    controller_uid: str = ""  # the controlling ownerReference (an ephemeral volume's pod)
    errors: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def selected_node(self) -> str | None:
        return self.annotations.get(ANN_SELECTED_NODE)

    @property
    def fully_bound(self) -> bool:
        return bool(self.volume_name) and ANN_BIND_COMPLETED in self.annotations


def claim_from_k8s(obj: Mapping[str, Any]) -> Claim:
    meta = _map(obj, "metadata")
    spec = _map(obj, "spec")
    ann = _labels(meta, "annotations")
    errors: list[str] = []
    # The beta annotation wins over the field (GetPersistentVolumeClaimClass).
    sc = ann.get(BETA_STORAGE_CLASS, _str(spec, "storageClassName"))
    return Claim(
        namespace=_str(meta, "namespace") or "default",
        name=_str(meta, "name"),
        uid=_str(meta, "uid"),
        resource_version=_str(meta, "resourceVersion"),
        storage_class=sc,
        volume_name=_str(spec, "volumeName"),
        access_modes=_strings(_list(spec, "accessModes")),
        request=_storage(
            _map(_map(spec, "resources"), "requests"), "spec.resources.requests", errors
        ),
        volume_mode=_str(spec, "volumeMode") or FILESYSTEM,
        selector=_label_selector(spec.get("selector"), "spec.selector", errors),
        annotations=ann,
        phase=_str(_map(obj, "status"), "phase") or "Pending",
        deleting=meta.get("deletionTimestamp") is not None,
        controller_uid=_controller_uid(meta),
        errors=tuple(errors),
    )


# -- PersistentVolume -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str = ""


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    name: str
    uid: str = ""
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    storage_class: str = ""
    capacity: int = 0  # bytes of spec.capacity.storage
    access_modes: tuple[str, ...] = ()
    volume_mode: str = FILESYSTEM
    # spec.nodeAffinity.required's terms; None: no node affinity (any node)
    node_affinity: tuple[NodeSelectorTerm, ...] | None = None
    claim_ref: ClaimRef | None = None
    phase: str = "Pending"
    deleting: bool = False
    csi_driver: str = ""
    csi_handle: str = ""
    errors: tuple[str, ...] = ()

    def node_matches(self, labels: Mapping[str, str], name: str) -> bool:
        """CheckNodeAffinity: no affinity, or a required term the node matches."""
        return self.node_affinity is None or node_selector_matches(self.node_affinity, labels, name)

    def bound_to(self, claim: Claim) -> bool:
        """IsVolumeBoundToClaim: the claimRef names the claim (and its uid, if it has one)."""
        ref = self.claim_ref
        if ref is None or ref.name != claim.name or ref.namespace != claim.namespace:
            return False
        return not ref.uid or ref.uid == claim.uid


def volume_from_k8s(obj: Mapping[str, Any]) -> PersistentVolume:
    meta = _map(obj, "metadata")
    spec = _map(obj, "spec")
    ann = _labels(meta, "annotations")
    errors: list[str] = []
    affinity: tuple[NodeSelectorTerm, ...] | None = None
    required = _map(spec, "nodeAffinity").get("required")
    if isinstance(required, Mapping):
        affinity = _node_terms(required, "spec.nodeAffinity.required", errors)
    ref_raw = spec.get("claimRef")
    ref = (
        ClaimRef(_str(ref_raw, "namespace"), _str(ref_raw, "name"), _str(ref_raw, "uid"))
        if isinstance(ref_raw, Mapping)
        else None
    )
    csi = _map(spec, "csi")
    return PersistentVolume(
        name=_str(meta, "name"),
        uid=_str(meta, "uid"),
        resource_version=_str(meta, "resourceVersion"),
        labels=_labels(meta, "labels"),
        annotations=ann,
        storage_class=ann.get(BETA_STORAGE_CLASS, _str(spec, "storageClassName")),
        capacity=_storage(_map(spec, "capacity"), "spec.capacity", errors),
        access_modes=_strings(_list(spec, "accessModes")),
        volume_mode=_str(spec, "volumeMode") or FILESYSTEM,
        node_affinity=affinity,
        claim_ref=ref,
        phase=_str(_map(obj, "status"), "phase") or "Pending",
        deleting=meta.get("deletionTimestamp") is not None,
        csi_driver=_str(csi, "driver"),
        csi_handle=_str(csi, "volumeHandle"),
        errors=tuple(errors),
    )


# -- StorageClass and CSINode -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    provisioner: str = ""
    binding_mode: str = IMMEDIATE  # the API server defaults a missing mode to Immediate
    allowed_topologies: tuple[TopologyTerm, ...] = ()

    @property
    def delayed(self) -> bool:
        return self.binding_mode == WAIT_FOR_FIRST_CONSUMER


def storage_class_from_k8s(obj: Mapping[str, Any]) -> StorageClass:
    terms: list[TopologyTerm] = []
    for t in _list(obj, "allowedTopologies"):
        reqs = tuple(
            (_str(e, "key"), frozenset(_strings(_list(e, "values"))))
            for e in _list(t, "matchLabelExpressions")
        )
        terms.append(TopologyTerm(reqs))
    return StorageClass(
        name=_str(_map(obj, "metadata"), "name"),
        provisioner=_str(obj, "provisioner"),
        binding_mode=_str(obj, "volumeBindingMode") or IMMEDIATE,
        allowed_topologies=tuple(terms),
    )


@dataclass(frozen=True, slots=True)
class CSINode:
    """A node's CSI drivers: driver name -> allocatable.count (only drivers that report
    one: no count means no limit)."""

    name: str
    limits: Mapping[str, int] = field(default_factory=dict)


def csi_node_from_k8s(obj: Mapping[str, Any]) -> CSINode:
    limits: dict[str, int] = {}
    for d in _list(_map(obj, "spec"), "drivers"):
        count = _map(d, "allocatable").get("count")
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            limits[_str(d, "name")] = count
    return CSINode(_str(_map(obj, "metadata"), "name"), limits)

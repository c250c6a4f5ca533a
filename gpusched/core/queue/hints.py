"""Requeue hints for node updates: what changed in a node, and which rejections it may undo.

kube-scheduler asks each plugin that rejected a pod whether a node update may make the pod
schedulable (its QueueingHintFns for the NodeUpdate event: allocatable grew, labels changed,
taints changed, unschedulable flipped). Here the node update is summed up once as a
`NodeChange` (computed from the old and new `NodeModel`), and each in-tree filter says which
changes it reads. A pod moves only if one of the plugins that rejected it reads something
that changed, so a node update that changes nothing a plugin reads (a heartbeat, a label
nothing selects on) moves no pod, and a backlog of unschedulable pods no longer wakes, and
costs an attempt each, on every node update.

Only changes that can turn a rejection into a pass count: more allocatable, a card gained
or healed, a taint removed (or, for a topology spread, added), a node made schedulable. A
plugin not in the table (out of tree, or new) is woken by any node change, as is a pod
whose rejection names no plugin. Bound pods arriving or relabelled wake only the filters
that count pods by label (POD_ADD_PLUGINS), and storage events only the volume plugins:
every bind emits the first, so an out-of-tree filter that counts pods or reads claims is
retried by the periodic flush, not on every bind.

Storage events (a claim, volume, StorageClass or CSINode added or updated; the daemon
watches them only when a profile has a volume plugin) wake only the pods a volume plugin
rejected; DRA events (a ResourceClaim, ResourceSlice or DeviceClass) only the pods
DynamicResources rejected.
"""

from __future__ import annotations

import enum

from gpusched.framework.status import INVALID_POD
from gpusched.model.node import Card, NodeModel


class ClusterEvent(enum.Enum):
    NODE_ADD = "NodeAdd"
    NODE_UPDATE = "NodeUpdate"
    NODE_DELETE = "NodeDelete"
    ASSIGNED_POD_DELETE = "AssignedPodDelete"  # capacity freed
    ASSIGNED_POD_ADD = "AssignedPodAdd"  # a pod bound (by anyone), or ours confirmed
    # A bound pod's labels changed or it started terminating (it may stop matching a
    # spread selector).
    ASSIGNED_POD_UPDATE = "AssignedPodUpdate"
    POD_GROUP_CHANGE = "PodGroupChange"
    # Storage added or updated (the daemon's watches, only when a profile uses a volume
    # plugin): only pods a volume plugin rejected may care.
    PVC_CHANGE = "PersistentVolumeClaimChange"
    PV_CHANGE = "PersistentVolumeChange"
    STORAGE_CLASS_CHANGE = "StorageClassChange"
    CSI_NODE_CHANGE = "CSINodeChange"
    # Dynamic Resource Allocation objects added or updated (the daemon's watches, only when
    # a profile uses DynamicResources): only pods DynamicResources rejected may care.
    RESOURCE_CLAIM_CHANGE = "ResourceClaimChange"
    RESOURCE_SLICE_CHANGE = "ResourceSliceChange"
    DEVICE_CLASS_CHANGE = "DeviceClassChange"
    # An ElasticQuota added, changed or deleted, or a Namespace moved to another tenant
    # (kube/quotas.py): only pods ElasticQuota refused may care.
    QUOTA_CHANGE = "ElasticQuotaChange"
    # Live GPU telemetry moved in a pod's favour (daemon/telemetry.py: a node cooled, or
    # its readings went stale and read neutral): only pods the Thermal filter rejected may
    # care. A card healed is a NODE_UPDATE with NodeChange.CARDS.
    TELEMETRY = "GPUTelemetryChange"
    FLUSH = "UnschedulableTimeout"


class NodeChange(enum.Flag):
    NONE = 0
    # CPU, memory, pod count or an other resource's (rdma/hca, ephemeral-storage) grew
    ALLOCATABLE = enum.auto()
    CARDS = enum.auto()  # a card appeared, healed, grew, or changed model or NVLink island
    LABELS = enum.auto()  # a label some selector reads (a watched key) changed
    TAINTS = enum.auto()  # a taint went away (or changed)
    SCHEDULABLE = enum.auto()  # spec.unschedulable went from true to false
    TOPOLOGY = enum.auto()  # rack, spine or NVLink fabric clique changed
    # a taint was added: it never helps TaintToleration, but with nodeTaintsPolicy Honor it
    # takes the node's domain out of a spread's global minimum (kube-scheduler requeues
    # PodTopologySpread on any taint change)
    TAINT_ADDED = enum.auto()
    ANY = ALLOCATABLE | CARDS | LABELS | TAINTS | SCHEDULABLE | TOPOLOGY | TAINT_ADDED


# What each in-tree filter reads from a node: a node update wakes a pod it rejected only if
# one of these changed.
PLUGIN_NODE_CHANGES: dict[str, NodeChange] = {
    "NodeResourcesFit": NodeChange.ALLOCATABLE,
    "GPUFit": NodeChange.CARDS,
    "NodeAffinity": NodeChange.LABELS,
    "TaintToleration": NodeChange.TAINTS,
    "NodeUnschedulable": NodeChange.SCHEDULABLE,
    # A node keeps its name; a new node is a NODE_ADD.
    "NodeName": NodeChange.NONE,
    # Ports are freed by a pod's deletion (ASSIGNED_POD_DELETE), never by a node update.
    "NodePorts": NodeChange.NONE,
    # The temperature is not node data (telemetry); more cards lower a pod's share of them.
    "Thermal": NodeChange.CARDS,
    # Volume node affinity, allowedTopologies and zones are read from labels; the keys are
    # declared watched at PreFilter, so their changes count as LABELS.
    "VolumeBinding": NodeChange.LABELS,
    "VolumeZone": NodeChange.LABELS,
    # Claims in use and attach limits change with pods and CSINodes, not with a node update.
    "VolumeRestrictions": NodeChange.NONE,
    "NodeVolumeLimits": NodeChange.NONE,
    # Topology keys are watched label keys: a node gaining or changing one may put it in
    # a domain that holds (or no longer holds) the pods a term selects.
    "InterPodAffinity": NodeChange.LABELS,
    # Slices select nodes by label (kube registers Node Add and UpdateNodeLabel); devices
    # come and go with ResourceSlices (DRA_EVENTS), which also re-derive a node's cards.
    "DynamicResources": NodeChange.LABELS | NodeChange.CARDS,
    # A topology key's value (a watched label) or, with nodeTaintsPolicy Honor, a taint.
    "PodTopologySpread": NodeChange.LABELS | NodeChange.TAINTS | NodeChange.TAINT_ADDED,
    # The cluster's capacity scales the guarantees down when the mins exceed it (the
    # non-preemptible rule reads them); a node's labels or taints change nothing.
    "ElasticQuota": NodeChange.ALLOCATABLE | NodeChange.CARDS,
}

VOLUME_PLUGINS = frozenset(
    {"VolumeBinding", "VolumeZone", "VolumeRestrictions", "NodeVolumeLimits"}
)
VOLUME_EVENTS = frozenset(
    {
        ClusterEvent.PVC_CHANGE,
        ClusterEvent.PV_CHANGE,
        ClusterEvent.STORAGE_CLASS_CHANGE,
        ClusterEvent.CSI_NODE_CHANGE,
    }
)

QUOTA_PLUGINS = frozenset({"ElasticQuota"})
# Filters that read live telemetry (the snapshot's temperatures), woken by TELEMETRY.
TELEMETRY_PLUGINS = frozenset({"Thermal"})
# Rejections a pod event helps only when the event's pod is of the same tenant (its usage
# changed): the queue maps both namespaces to their tenants (SchedulingQueue.tenant_of).
TENANT_SCOPED = QUOTA_PLUGINS

DRA_PLUGINS = frozenset({"DynamicResources"})
DRA_EVENTS = frozenset(
    {
        ClusterEvent.RESOURCE_CLAIM_CHANGE,
        ClusterEvent.RESOURCE_SLICE_CHANGE,
        ClusterEvent.DEVICE_CLASS_CHANGE,
    }
)


# Rejections only the pod itself could lift (a malformed pod): no cluster event wakes them,
# only the periodic flush.
POD_ONLY = frozenset({INVALID_POD})

# Filters whose verdict depends on the node and the pod itself only, never on other pods
# (the volume ones: on the node and the storage objects).
NODE_ONLY = frozenset(
    {
        "NodeAffinity",
        "TaintToleration",
        "NodeUnschedulable",
        "NodeName",
        "VolumeBinding",
        "VolumeZone",
        INVALID_POD,
    }
)
POD_EVENTS = frozenset(
    {
        ClusterEvent.ASSIGNED_POD_ADD,
        ClusterEvent.ASSIGNED_POD_UPDATE,
        ClusterEvent.ASSIGNED_POD_DELETE,
        ClusterEvent.POD_GROUP_CHANGE,
    }
)
# Filters another pod's arrival or relabelling may satisfy (more pods in the least crowded
# domain raise the global minimum; a pod an affinity term selects arrives): only these wake
# on ASSIGNED_POD_ADD / _UPDATE (kube-scheduler's Pod/Add and Pod/UpdatePodLabel events),
# which every bind emits, so a backlog rejected for capacity is not retried on every bind.
# Preemption's Filter holds a nominated node's room until the preemptor is placed: its
# binding (a pod added) gives the room back.
POD_ADD_PLUGINS = frozenset({"PodTopologySpread", "InterPodAffinity", "Preemption"})
# Filters that count only the pods of the rejected pod's own namespace (not InterPodAffinity:
# its terms may select other namespaces).
NAMESPACED = frozenset({"PodTopologySpread"})
# Filters a node's deletion may satisfy (a domain holding the global minimum goes away).
NODE_DELETE_PLUGINS = frozenset({"PodTopologySpread"})


def node_update_may_help(rejected_by: frozenset[str], change: NodeChange) -> bool:
    if not change:
        return False
    if not rejected_by:
        return True
    return any(change & PLUGIN_NODE_CHANGES.get(p, NodeChange.ANY) for p in rejected_by)


def may_help(
    rejected_by: frozenset[str], event: ClusterEvent, change: NodeChange = NodeChange.ANY
) -> bool:
    """The requeue hint: whether `event` may make a pod rejected by `rejected_by`
    schedulable; `change` says what a NODE_UPDATE changed (`node_change`). Coarse beyond node
    updates (a false yes costs one attempt, a false no strands a pod until the periodic
    flush)."""
    if event is ClusterEvent.FLUSH:
        return True
    if event is ClusterEvent.QUOTA_CHANGE:
        return not rejected_by or bool(rejected_by & QUOTA_PLUGINS)
    if event is ClusterEvent.TELEMETRY:
        return not rejected_by or bool(rejected_by & TELEMETRY_PLUGINS)
    if event in DRA_EVENTS:
        # A claim, slice or class changing helps only a pod DynamicResources rejected (or
        # one whose rejection names no plugin).
        return not rejected_by or bool(rejected_by & DRA_PLUGINS)
    if rejected_by and rejected_by <= POD_ONLY:
        return False
    if event in (ClusterEvent.ASSIGNED_POD_ADD, ClusterEvent.ASSIGNED_POD_UPDATE):
        return bool(rejected_by & POD_ADD_PLUGINS)
    if event is ClusterEvent.NODE_UPDATE:
        return node_update_may_help(rejected_by, change)
    if event in VOLUME_EVENTS:
        # A claim, volume, class or CSINode changing helps only a pod a volume plugin
        # rejected (or one whose rejection names no plugin).
        return not rejected_by or bool(rejected_by & VOLUME_PLUGINS)
    if event in POD_EVENTS and rejected_by and rejected_by <= NODE_ONLY:
        # Another pod coming or going changes no node's labels, taints or cordon.
        return False
    # Fewer nodes never make a pod fit, except one whose spread they skew.
    return event is not ClusterEvent.NODE_DELETE or bool(rejected_by & NODE_DELETE_PLUGINS)


def tenant_scoped(rejected_by: frozenset[str], event: ClusterEvent) -> bool:
    """Whether pod event `event` helps a pod rejected by `rejected_by` only when the event's
    pod is of its tenant: every rejecting plugin the event can help counts that tenant's
    usage only (a quota refusal is lifted by the tenant's own pods leaving)."""
    if event in (ClusterEvent.ASSIGNED_POD_ADD, ClusterEvent.ASSIGNED_POD_UPDATE):
        return False
    helped = rejected_by - NODE_ONLY
    return bool(helped) and helped <= TENANT_SCOPED


def namespace_scoped(rejected_by: frozenset[str], event: ClusterEvent) -> bool:
    """Whether pod event `event` helps a pod rejected by `rejected_by` only when the event's
    pod is in its namespace: every rejecting plugin the event can help counts that
    namespace's pods only (a NodeResourcesFit rejection is helped by a deletion anywhere)."""
    if event in (ClusterEvent.ASSIGNED_POD_ADD, ClusterEvent.ASSIGNED_POD_UPDATE):
        helped = rejected_by & POD_ADD_PLUGINS
    else:
        helped = rejected_by - NODE_ONLY
    return bool(helped) and helped <= NAMESPACED


def _cards_gained(old: tuple[Card, ...], new: tuple[Card, ...]) -> bool:
    before = {c.index: c for c in old}
    for c in new:
        o = before.get(c.index)
        if (
            o is None
            or (c.healthy and not o.healthy)
            or c.memory_mib > o.memory_mib
            or c.model != o.model
            or c.nvlink_island != o.nvlink_island
        ):
            return True
    return False


def _other_grew(old: tuple[tuple[str, int], ...], new: tuple[tuple[str, int], ...]) -> bool:
    """An other resource appeared or grew (a device plugin registering after the node)."""
    before = dict(old)
    return any(v > before.get(name, 0) for name, v in new)


def node_change(old: NodeModel, new: NodeModel, *, labels_changed: bool) -> NodeChange:
    """What in a node update may make a rejected pod schedulable. `labels_changed`: whether
    a watched label changed (the snapshot knows which keys are watched)."""
    out = NodeChange.NONE
    if (
        new.cpu_milli > old.cpu_milli
        or new.memory_bytes > old.memory_bytes
        or new.pods > old.pods
        or (new.other != old.other and _other_grew(old.other, new.other))
    ):
        out |= NodeChange.ALLOCATABLE
    if new.cards != old.cards and _cards_gained(old.cards, new.cards):
        out |= NodeChange.CARDS
    if labels_changed:
        out |= NodeChange.LABELS
    if new.taints != old.taints and not set(old.taints) <= set(new.taints):
        out |= NodeChange.TAINTS
    if not set(new.taints) <= set(old.taints):
        out |= NodeChange.TAINT_ADDED
    if old.unschedulable and not new.unschedulable:
        out |= NodeChange.SCHEDULABLE
    if old.rack != new.rack or old.spine != new.spine or old.clique != new.clique:
        out |= NodeChange.TOPOLOGY
    return out

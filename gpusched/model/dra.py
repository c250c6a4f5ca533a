"""Dynamic Resource Allocation (resource.k8s.io/v1) as the scheduler sees it: DeviceClasses,
ResourceSlices and ResourceClaims parsed from the API's JSON into slim frozen objects.

The field names follow the v1 Go types (k8s.io/api/resource/v1/types.go); in v1 a request's
`allocationMode`, `count`, selectors and capacity live under `requests[].exactly` or in each
`requests[].firstAvailable[]` entry, which both parse to `DeviceSubRequest` here (an
`exactly` request is a request with one alternative, named like the request itself).

Quantities stay exact (`Decimal`, model/quantity.py): CEL compares them and consumable
capacity sums them, and neither may round. Attributes keep their type (int, bool, string,
version), because a CEL selector sees `device.attributes["gpu.nvidia.com"].index` as an int
and `...driverVersion` as a semver.

Malformed objects never raise: parsing records `errors` on the object, and whoever uses it
(the allocator, the plugin) refuses it with that message.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal


class AttributeKind(enum.Enum):
    INT = "int"
    BOOL = "bool"
    STRING = "string"
    VERSION = "version"


@dataclass(frozen=True, slots=True)
class Attribute:
    kind: AttributeKind
    value: int | bool | str  # a version is its semver string


@dataclass(frozen=True, slots=True)
class CapacityPolicy:
    """DeviceCapacity.requestPolicy (consumable capacity): what one request may consume."""

    default: Decimal | None = None
    valid_values: tuple[Decimal, ...] = ()  # sorted ascending
    valid_range_min: Decimal | None = None
    valid_range_max: Decimal | None = None
    valid_range_step: Decimal | None = None


@dataclass(frozen=True, slots=True)
class Capacity:
    value: Decimal
    policy: CapacityPolicy | None = None


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    key: str
    value: str
    effect: str  # NoSchedule | NoExecute | None (1.36: "None" only informs)
    time_added: str = ""


@dataclass(frozen=True, slots=True)
class Toleration:
    """DeviceToleration: like a pod toleration, against DeviceTaints."""

    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # "" matches every effect
    toleration_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class CounterConsumption:
    """Device.consumesCounters[]: counters this device takes from a shared counter set of
    its slice's pool (partitionable devices)."""

    counter_set: str
    counters: Mapping[str, Decimal]


@dataclass(frozen=True, slots=True)
class CounterSet:
    """ResourceSlice.sharedCounters[]."""

    name: str
    counters: Mapping[str, Decimal]


@dataclass(frozen=True, slots=True)
class Device:
    name: str
    # Qualified names: "<domain>/<id>"; an unqualified name in the API belongs to the
    # driver's domain and is stored here already qualified with the slice's driver.
    attributes: Mapping[str, Attribute] = field(default_factory=dict)
    capacity: Mapping[str, Capacity] = field(default_factory=dict)
    consumes_counters: tuple[CounterConsumption, ...] = ()
    taints: tuple[DeviceTaint, ...] = ()
    allow_multiple_allocations: bool = False
    # perDeviceNodeSelection slices: each device says where it is reachable from.
    node_name: str = ""
    node_selector: Mapping[str, object] | None = None  # a raw v1.NodeSelector
    all_nodes: bool = False
    binds_to_node: bool = False
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    name: str
    driver: str
    pool: str
    pool_generation: int
    pool_slice_count: int
    node_name: str = ""  # devices local to this node
    node_selector: Mapping[str, object] | None = None  # a raw v1.NodeSelector
    all_nodes: bool = False
    per_device_node_selection: bool = False
    devices: tuple[Device, ...] = ()
    shared_counters: tuple[CounterSet, ...] = ()
    uid: str = ""
    resource_version: str = ""
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()  # CEL expressions
    # Opaque driver configuration, copied into an allocation's config (source FromClass).
    config: tuple[Mapping[str, object], ...] = ()
    extended_resource_name: str = ""
    uid: str = ""
    resource_version: str = ""
    errors: tuple[str, ...] = ()


class AllocationMode(enum.Enum):
    EXACT_COUNT = "ExactCount"
    ALL = "All"


@dataclass(frozen=True, slots=True)
class DeviceSubRequest:
    """One way to satisfy a request: `exactly`, or one entry of `firstAvailable`."""

    name: str
    device_class: str
    selectors: tuple[str, ...] = ()  # CEL expressions
    mode: AllocationMode = AllocationMode.EXACT_COUNT
    count: int = 1
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()
    capacity_requests: Mapping[str, Decimal] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    name: str
    # `exactly` parses to one alternative named like the request; `firstAvailable` to its
    # entries in the user's order of preference.
    alternatives: tuple[DeviceSubRequest, ...]
    first_available: bool = False


@dataclass(frozen=True, slots=True)
class DeviceConstraint:
    # Request names the constraint covers ("<request>" or "<request>/<subrequest>"); empty
    # means every request of the claim.
    requests: tuple[str, ...] = ()
    match_attribute: str = ""  # qualified name; every chosen device has the same value
    distinct_attribute: str = ""  # qualified name; every chosen device a different value


@dataclass(frozen=True, slots=True)
class DeviceResult:
    """One entry of status.allocation.devices.results."""

    request: str  # "<request>" or "<request>/<subrequest>"
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()
    share_id: str = ""
    consumed_capacity: Mapping[str, Decimal] = field(default_factory=dict)
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()

    @property
    def device_id(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class AllocationResult:
    results: tuple[DeviceResult, ...] = ()
    # Opaque configs copied from the class (FromClass) and the claim (FromClaim), raw.
    config: tuple[Mapping[str, object], ...] = ()
    node_selector: Mapping[str, object] | None = None  # a raw v1.NodeSelector
    allocation_timestamp: str = ""


@dataclass(frozen=True, slots=True)
class ConsumerRef:
    """status.reservedFor[]: who uses the claim (a pod, for the scheduler)."""

    resource: str
    name: str
    uid: str
    api_group: str = ""


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str
    resource_version: str = ""
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()
    config: tuple[Mapping[str, object], ...] = ()  # spec.devices.config[], raw
    allocation: AllocationResult | None = None
    reserved_for: tuple[ConsumerRef, ...] = ()
    deleting: bool = False
    # metadata.annotations["resource.kubernetes.io/pod-claim-name"] and the controlling
    # owner: a claim made from a template for a pod.
    owner_pod_uid: str = ""
    errors: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PodClaim:
    """A pod's spec.resourceClaims[] entry, resolved against status.resourceClaimStatuses:
    the ResourceClaim it means (`claim` "" while the controller has not made it yet)."""

    name: str  # the pod's name for it (containers refer to it)
    claim: str = ""  # the ResourceClaim's name in the pod's namespace
    template: str = ""  # resourceClaimTemplateName, when made from a template
    # A template claim whose status entry has no name: the controller decided the pod
    # needs no claim for it (resourceClaimStatuses[].resourceClaimName null).
    not_needed: bool = False

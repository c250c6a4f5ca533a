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

Qualified names: a slice's unqualified attribute and capacity names (and a result's
consumedCapacity names) are qualified with the driver at parse time (and a result's are
written back unqualified when in the driver's domain); a request's `capacity.requests`
names stay as written, because an unqualified one means "the driver of the device under
evaluation", which only the allocator knows (`qualify`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gpusched.model.quantity import QuantityError, parse_quantity


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
class DeviceStatus:
    """One status.devices[] entry, written by the driver: the conditions PreBind waits for
    when a result carries bindingConditions (DRADeviceBindingConditions, beta in 1.36)."""

    driver: str
    pool: str
    device: str
    share_id: str = ""
    conditions: Mapping[str, str] = field(default_factory=dict)  # type -> "True" | "False" | ...

    @property
    def device_id(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.device)


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
    # metadata.finalizers: the scheduler adds FINALIZER before it writes an allocation.
    finalizers: tuple[str, ...] = ()
    # metadata.annotations[ANN_POD_CLAIM_NAME]: the pod's name for a claim made from a
    # template (spec.resourceClaims[].name).
    pod_claim_name: str = ""
    # status.devices: what the drivers report per allocated device.
    device_statuses: tuple[DeviceStatus, ...] = ()

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


# -- parsing (resource.k8s.io/v1 JSON) ----------------------------------------------------

FINALIZER = "resource.kubernetes.io/delete-protection"
ANN_POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
API_VERSION = "resource.k8s.io/v1"
_TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")
_TOLERATION_OPERATORS = ("Equal", "Exists")


def _obj(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _items(value: Any, where: str, errors: list[str]) -> list[Mapping[str, Any]]:
    """The objects of a JSON list; a non-list or a non-object entry is an error."""
    if value is None:
        return []
    if not isinstance(value, list):
        errors.append(f"{where} is not a list")
        return []
    out: list[Mapping[str, Any]] = []
    for i, item in enumerate(value):
        if isinstance(item, dict):
            out.append(item)
        else:
            errors.append(f"{where}[{i}] is not an object")
    return out


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _strings(value: Any, where: str, errors: list[str]) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        errors.append(f"{where} is not a list of strings")
        return ()
    return tuple(value)


def _int(value: Any) -> int | None:
    """A JSON integer (a bool is not one)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _quantity(value: Any, where: str, errors: list[str]) -> Decimal | None:
    try:
        return parse_quantity(value)
    except QuantityError as exc:
        errors.append(f"{where}: {exc}")
        return None


def _quantities(value: Any, where: str, errors: list[str], domain: str) -> dict[str, Decimal]:
    """A map of quantities keyed by (qualified) name; `domain` qualifies bare names."""
    out: dict[str, Decimal] = {}
    if value is None:
        return out
    if not isinstance(value, dict):
        errors.append(f"{where} is not an object")
        return out
    for name, raw in value.items():
        q = _quantity(raw, f"{where}[{name!r}]", errors)
        if q is not None:
            out[qualify(str(name), domain)] = q
    return out


def qualify(name: str, domain: str) -> str:
    """A QualifiedName with its domain: an unqualified name (a C identifier) belongs to
    `domain` (the driver's); "" leaves it unqualified."""
    if "/" in name or not domain:
        return name
    return f"{domain}/{name}"


def _selectors(value: Any, where: str, errors: list[str]) -> tuple[str, ...]:
    out: list[str] = []
    for i, sel in enumerate(_items(value, where, errors)):
        expr = _obj(sel.get("cel")).get("expression")
        if not isinstance(expr, str) or not expr.strip():
            # DeviceSelector is a one-of with only `cel` known: an unknown kind of selector
            # must not be ignored (it would widen the selection).
            errors.append(f"{where}[{i}] has no cel.expression")
        else:
            out.append(expr)
    return tuple(out)


def _tolerations(value: Any, where: str, errors: list[str]) -> tuple[Toleration, ...]:
    out: list[Toleration] = []
    for i, t in enumerate(_items(value, where, errors)):
        operator = _str(t.get("operator")) or "Equal"
        if operator not in _TOLERATION_OPERATORS:
            errors.append(f"{where}[{i}].operator={operator!r}: must be Equal or Exists")
            continue
        seconds = t.get("tolerationSeconds")
        out.append(
            Toleration(
                key=_str(t.get("key")),
                operator=operator,
                value=_str(t.get("value")),
                effect=_str(t.get("effect")),
                toleration_seconds=_int(seconds),
            )
        )
    return tuple(out)


def _taints(value: Any, where: str, errors: list[str]) -> tuple[DeviceTaint, ...]:
    out: list[DeviceTaint] = []
    for i, t in enumerate(_items(value, where, errors)):
        key = _str(t.get("key"))
        if not key:
            errors.append(f"{where}[{i}] has no key")
            continue
        # Consumers must treat an unknown effect like None (types.go), so it is kept as is.
        out.append(
            DeviceTaint(
                key=key,
                value=_str(t.get("value")),
                effect=_str(t.get("effect")),
                time_added=_str(t.get("timeAdded")),
            )
        )
    return tuple(out)


def _attribute(raw: Any, where: str, errors: list[str]) -> Attribute | None:
    """DeviceAttribute: exactly one of int, bool, string, version. The list kinds (ints,
    strings, ... of the alpha DRAListTypeAttributes, off in 1.36) have no CEL type here:
    such an attribute is left out, as a cluster without the gate drops it."""
    if not isinstance(raw, dict):
        errors.append(f"{where} is not an object")
        return None
    scalar = [k for k in ("int", "bool", "string", "version") if raw.get(k) is not None]
    if len(scalar) > 1:
        errors.append(f"{where} sets {' and '.join(scalar)}: exactly one value is allowed")
        return None
    if not scalar:
        if any(raw.get(k) is not None for k in ("ints", "bools", "strings", "versions")):
            return None
        errors.append(f"{where} has no value (int, bool, string or version)")
        return None
    kind = scalar[0]
    value = raw[kind]
    if kind == "int":
        number = _int(value)
        if number is None:
            errors.append(f"{where}.int={value!r} is not an integer")
            return None
        return Attribute(AttributeKind.INT, number)
    if kind == "bool":
        if not isinstance(value, bool):
            errors.append(f"{where}.bool={value!r} is not a boolean")
            return None
        return Attribute(AttributeKind.BOOL, value)
    if not isinstance(value, str):
        errors.append(f"{where}.{kind}={value!r} is not a string")
        return None
    if kind == "version" and not _SEMVER.fullmatch(value):
        errors.append(f"{where}.version={value!r} is not a semantic version")
        return None
    return Attribute(AttributeKind.STRING if kind == "string" else AttributeKind.VERSION, value)


# semver.org 2.0.0 (the API server validates the same way).
_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
)


def _policy(raw: Any, where: str, errors: list[str]) -> CapacityPolicy | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        errors.append(f"{where} is not an object")
        return None
    default = (
        None
        if raw.get("default") is None
        else _quantity(raw["default"], f"{where}.default", errors)
    )
    values: list[Decimal] = []
    raw_values = raw.get("validValues")
    if raw_values is not None:
        if not isinstance(raw_values, list):
            errors.append(f"{where}.validValues is not a list")
        else:
            for i, v in enumerate(raw_values):
                q = _quantity(v, f"{where}.validValues[{i}]", errors)
                if q is not None:
                    values.append(q)
    rng = raw.get("validRange")
    lo = hi = step = None
    if rng is not None:
        if not isinstance(rng, dict):
            errors.append(f"{where}.validRange is not an object")
        else:
            r = f"{where}.validRange"
            lo = None if rng.get("min") is None else _quantity(rng["min"], f"{r}.min", errors)
            hi = None if rng.get("max") is None else _quantity(rng["max"], f"{r}.max", errors)
            step = None if rng.get("step") is None else _quantity(rng["step"], f"{r}.step", errors)
            if lo is None and rng.get("min") is None:
                errors.append(f"{r}.min is required")
    if values and rng is not None:
        errors.append(f"{where} sets both validValues and validRange: set one")
    return CapacityPolicy(
        default=default,
        valid_values=tuple(sorted(values)),
        valid_range_min=lo,
        valid_range_max=hi,
        valid_range_step=step,
    )


def _capacity(value: Any, where: str, errors: list[str], driver: str) -> dict[str, Capacity]:
    out: dict[str, Capacity] = {}
    if value is None:
        return out
    if not isinstance(value, dict):
        errors.append(f"{where} is not an object")
        return out
    for name, raw in value.items():
        at = f"{where}[{name!r}]"
        if not isinstance(raw, dict) or raw.get("value") is None:
            errors.append(f"{at} has no value")
            continue
        q = _quantity(raw["value"], f"{at}.value", errors)
        if q is None:
            continue
        out[qualify(str(name), driver)] = Capacity(
            q, _policy(raw.get("requestPolicy"), f"{at}.requestPolicy", errors)
        )
    return out


def _counters(value: Any, where: str, errors: list[str]) -> dict[str, Decimal]:
    """map[string]Counter: each {value: quantity}."""
    out: dict[str, Decimal] = {}
    if value is None:
        return out
    if not isinstance(value, dict):
        errors.append(f"{where} is not an object")
        return out
    for name, raw in value.items():
        at = f"{where}[{name!r}]"
        if not isinstance(raw, dict) or raw.get("value") is None:
            errors.append(f"{at} has no value")
            continue
        q = _quantity(raw["value"], f"{at}.value", errors)
        if q is not None:
            out[str(name)] = q
    return out


def _bool(value: Any, where: str, errors: list[str]) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        errors.append(f"{where}={value!r} is not a boolean")
        return False
    return value


def _device(
    raw: Mapping[str, Any], where: str, errors: list[str], driver: str, per_device: bool
) -> Device | None:
    name = _str(raw.get("name"))
    if not name:
        errors.append(f"{where} has no name")
        return None
    where = f"{where} ({name})"
    attributes: dict[str, Attribute] = {}
    raw_attrs = raw.get("attributes")
    if raw_attrs is not None and not isinstance(raw_attrs, dict):
        errors.append(f"{where}.attributes is not an object")
    for key, value in _obj(raw_attrs).items():
        attr = _attribute(value, f"{where}.attributes[{key!r}]", errors)
        if attr is not None:
            attributes[qualify(str(key), driver)] = attr
    consumes: list[CounterConsumption] = []
    for i, c in enumerate(_items(raw.get("consumesCounters"), f"{where}.consumesCounters", errors)):
        at = f"{where}.consumesCounters[{i}]"
        counter_set = _str(c.get("counterSet"))
        if not counter_set:
            errors.append(f"{at} has no counterSet")
            continue
        consumes.append(
            CounterConsumption(counter_set, _counters(c.get("counters"), f"{at}.counters", errors))
        )
    node_name = _str(raw.get("nodeName"))
    selector = raw.get("nodeSelector")
    all_nodes = _bool(raw.get("allNodes"), f"{where}.allNodes", errors)
    chosen = sum((bool(node_name), selector is not None, all_nodes))
    if per_device and chosen != 1:
        errors.append(
            f"{where}: with perDeviceNodeSelection each device sets exactly one of nodeName,"
            " nodeSelector and allNodes"
        )
    elif not per_device and chosen:
        errors.append(f"{where} sets a node selection, but the slice has no perDeviceNodeSelection")
    if selector is not None and not isinstance(selector, dict):
        errors.append(f"{where}.nodeSelector is not an object")
        selector = None
    return Device(
        name=name,
        attributes=attributes,
        capacity=_capacity(raw.get("capacity"), f"{where}.capacity", errors, driver),
        consumes_counters=tuple(consumes),
        taints=_taints(raw.get("taints"), f"{where}.taints", errors),
        allow_multiple_allocations=_bool(
            raw.get("allowMultipleAllocations"), f"{where}.allowMultipleAllocations", errors
        ),
        node_name=node_name,
        node_selector=selector,
        all_nodes=all_nodes,
        binds_to_node=_bool(raw.get("bindsToNode"), f"{where}.bindsToNode", errors),
        binding_conditions=_strings(
            raw.get("bindingConditions"), f"{where}.bindingConditions", errors
        ),
        binding_failure_conditions=_strings(
            raw.get("bindingFailureConditions"), f"{where}.bindingFailureConditions", errors
        ),
    )


def resource_slice_from_k8s(obj: Mapping[str, Any]) -> ResourceSlice:
    """One ResourceSlice of resource.k8s.io/v1. Never raises: whatever is malformed is
    named in `errors` (the allocator then uses no device of the slice)."""
    meta = _obj(obj.get("metadata"))
    spec = _obj(obj.get("spec"))
    errors: list[str] = []
    if not isinstance(obj.get("spec"), dict):
        errors.append("spec is not an object")
    driver = _str(spec.get("driver"))
    if not driver:
        errors.append("spec.driver is missing")
    pool = _obj(spec.get("pool"))
    pool_name = _str(pool.get("name"))
    if not pool_name:
        errors.append("spec.pool.name is missing")
    generation = _int(pool.get("generation"))
    if generation is None or generation < 0:
        errors.append(f"spec.pool.generation={pool.get('generation')!r}: must be an integer >= 0")
        generation = 0
    count = _int(pool.get("resourceSliceCount"))
    if count is None or count < 1:
        errors.append(
            f"spec.pool.resourceSliceCount={pool.get('resourceSliceCount')!r}:"
            " must be an integer >= 1"
        )
        count = 1
    node_name = _str(spec.get("nodeName"))
    selector = spec.get("nodeSelector")
    if selector is not None and not isinstance(selector, dict):
        errors.append("spec.nodeSelector is not an object")
        selector = None
    all_nodes = _bool(spec.get("allNodes"), "spec.allNodes", errors)
    per_device = _bool(spec.get("perDeviceNodeSelection"), "spec.perDeviceNodeSelection", errors)
    chosen = sum((bool(node_name), selector is not None, all_nodes, per_device))
    if chosen != 1:
        errors.append(
            f"spec sets {chosen or 'none'} of nodeName, nodeSelector, allNodes and"
            " perDeviceNodeSelection: exactly one is required"
        )
    devices: list[Device] = []
    seen: set[str] = set()
    for i, raw in enumerate(_items(spec.get("devices"), "spec.devices", errors)):
        device = _device(raw, f"spec.devices[{i}]", errors, driver, per_device)
        if device is None:
            continue
        if device.name in seen:
            errors.append(f"spec.devices[{i}]: device name {device.name!r} appears twice")
            continue
        seen.add(device.name)
        devices.append(device)
    shared: list[CounterSet] = []
    for i, raw in enumerate(_items(spec.get("sharedCounters"), "spec.sharedCounters", errors)):
        name = _str(raw.get("name"))
        if not name:
            errors.append(f"spec.sharedCounters[{i}] has no name")
            continue
        shared.append(
            CounterSet(
                name, _counters(raw.get("counters"), f"spec.sharedCounters[{i}].counters", errors)
            )
        )
    return ResourceSlice(
        name=_str(meta.get("name")),
        driver=driver,
        pool=pool_name,
        pool_generation=generation,
        pool_slice_count=count,
        node_name=node_name,
        node_selector=selector,
        all_nodes=all_nodes,
        per_device_node_selection=per_device,
        devices=tuple(devices),
        shared_counters=tuple(shared),
        uid=_str(meta.get("uid")),
        resource_version=_str(meta.get("resourceVersion")),
        errors=tuple(errors),
    )


def _configs(value: Any, where: str, errors: list[str]) -> tuple[Mapping[str, object], ...]:
    """Opaque configuration entries, kept raw; each must carry `opaque.driver` (the one
    kind of DeviceConfiguration)."""
    out: list[Mapping[str, object]] = []
    for i, raw in enumerate(_items(value, where, errors)):
        if not _str(_obj(raw.get("opaque")).get("driver")):
            errors.append(f"{where}[{i}] has no opaque.driver")
            continue
        out.append(raw)
    return tuple(out)


def device_class_from_k8s(obj: Mapping[str, Any]) -> DeviceClass:
    """One DeviceClass of resource.k8s.io/v1. Never raises (see `errors`)."""
    meta = _obj(obj.get("metadata"))
    spec = _obj(obj.get("spec"))
    errors: list[str] = []
    if obj.get("spec") is not None and not isinstance(obj.get("spec"), dict):
        errors.append("spec is not an object")
    return DeviceClass(
        name=_str(meta.get("name")),
        selectors=_selectors(spec.get("selectors"), "spec.selectors", errors),
        config=_configs(spec.get("config"), "spec.config", errors),
        extended_resource_name=_str(spec.get("extendedResourceName")),
        uid=_str(meta.get("uid")),
        resource_version=_str(meta.get("resourceVersion")),
        errors=tuple(errors),
    )


def _sub_request(
    raw: Mapping[str, Any], name: str, where: str, errors: list[str], *, exact: bool
) -> DeviceSubRequest | None:
    device_class = _str(raw.get("deviceClassName"))
    if not device_class:
        errors.append(f"{where}.deviceClassName is missing")
        return None
    raw_mode = raw.get("allocationMode") or "ExactCount"
    try:
        mode = AllocationMode(raw_mode)
    except ValueError:
        # "Clients must refuse to handle requests with unknown modes."
        errors.append(f"{where}.allocationMode={raw_mode!r}: must be ExactCount or All")
        return None
    count = 1
    raw_count = raw.get("count")
    if mode is AllocationMode.EXACT_COUNT and raw_count is not None and raw_count != 0:
        number = _int(raw_count)
        if number is None or number < 1:
            errors.append(f"{where}.count={raw_count!r}: must be an integer >= 1")
            return None
        count = number
    elif mode is AllocationMode.ALL:
        count = 0
    capacity = _obj(raw.get("capacity"))
    return DeviceSubRequest(
        name=name,
        device_class=device_class,
        selectors=_selectors(raw.get("selectors"), f"{where}.selectors", errors),
        mode=mode,
        count=count,
        admin_access=exact and _bool(raw.get("adminAccess"), f"{where}.adminAccess", errors),
        tolerations=_tolerations(raw.get("tolerations"), f"{where}.tolerations", errors),
        # Unqualified names stay unqualified: they mean the driver of whichever device is
        # under evaluation, which only the allocator knows.
        capacity_requests=_quantities(
            capacity.get("requests"), f"{where}.capacity.requests", errors, ""
        ),
    )


def _request(raw: Mapping[str, Any], where: str, errors: list[str]) -> DeviceRequest | None:
    name = _str(raw.get("name"))
    if not name:
        errors.append(f"{where} has no name")
        return None
    where = f"{where} ({name})"
    exactly = raw.get("exactly")
    first = raw.get("firstAvailable")
    if (exactly is None) == (first is None):
        errors.append(f"{where} must set exactly one of exactly and firstAvailable")
        return None
    if exactly is not None:
        if not isinstance(exactly, dict):
            errors.append(f"{where}.exactly is not an object")
            return None
        sub = _sub_request(exactly, name, f"{where}.exactly", errors, exact=True)
        return None if sub is None else DeviceRequest(name, (sub,))
    subs: list[DeviceSubRequest] = []
    items = _items(first, f"{where}.firstAvailable", errors)
    if not items:
        errors.append(f"{where}.firstAvailable is empty")
        return None
    for i, item in enumerate(items):
        sub_name = _str(item.get("name"))
        if not sub_name:
            errors.append(f"{where}.firstAvailable[{i}] has no name")
            return None
        sub = _sub_request(item, sub_name, f"{where}.firstAvailable[{i}]", errors, exact=False)
        if sub is None:
            return None
        subs.append(sub)
    return DeviceRequest(name, tuple(subs), first_available=True)


def _constraint(raw: Mapping[str, Any], where: str, errors: list[str]) -> DeviceConstraint | None:
    match = _str(raw.get("matchAttribute"))
    distinct = _str(raw.get("distinctAttribute"))
    if bool(match) == bool(distinct):
        errors.append(f"{where} must set exactly one of matchAttribute and distinctAttribute")
        return None
    if "/" not in (match or distinct):
        errors.append(f"{where}: attribute {match or distinct!r} must include its domain")
        return None
    return DeviceConstraint(
        requests=_strings(raw.get("requests"), f"{where}.requests", errors),
        match_attribute=match,
        distinct_attribute=distinct,
    )


def _result(raw: Mapping[str, Any], where: str, errors: list[str]) -> DeviceResult | None:
    request, driver, pool, device = (
        _str(raw.get(k)) for k in ("request", "driver", "pool", "device")
    )
    if not (request and driver and pool and device):
        errors.append(f"{where} needs request, driver, pool and device")
        return None
    return DeviceResult(
        request=request,
        driver=driver,
        pool=pool,
        device=device,
        admin_access=_bool(raw.get("adminAccess"), f"{where}.adminAccess", errors),
        tolerations=_tolerations(raw.get("tolerations"), f"{where}.tolerations", errors),
        share_id=_str(raw.get("shareID")),
        # "The domain prefix may be omitted if it is the same as the driver name."
        consumed_capacity=_quantities(
            raw.get("consumedCapacity"), f"{where}.consumedCapacity", errors, driver
        ),
        binding_conditions=_strings(
            raw.get("bindingConditions"), f"{where}.bindingConditions", errors
        ),
        binding_failure_conditions=_strings(
            raw.get("bindingFailureConditions"), f"{where}.bindingFailureConditions", errors
        ),
    )


def _allocation(raw: Any, errors: list[str]) -> AllocationResult | None:
    if raw is None:
        return None
    where = "status.allocation"
    if not isinstance(raw, dict):
        errors.append(f"{where} is not an object")
        # Something is allocated, even if we cannot read what: never take it for free.
        return AllocationResult()
    devices = _obj(raw.get("devices"))
    results: list[DeviceResult] = []
    for i, r in enumerate(_items(devices.get("results"), f"{where}.devices.results", errors)):
        result = _result(r, f"{where}.devices.results[{i}]", errors)
        if result is not None:
            results.append(result)
    selector = raw.get("nodeSelector")
    if selector is not None and not isinstance(selector, dict):
        errors.append(f"{where}.nodeSelector is not an object")
        selector = None
    return AllocationResult(
        results=tuple(results),
        config=tuple(_items(devices.get("config"), f"{where}.devices.config", errors)),
        node_selector=selector,
        allocation_timestamp=_str(raw.get("allocationTimestamp")),
    )


def _consumers(value: Any, errors: list[str]) -> tuple[ConsumerRef, ...]:
    out: list[ConsumerRef] = []
    for i, r in enumerate(_items(value, "status.reservedFor", errors)):
        uid = _str(r.get("uid"))
        if not uid:
            errors.append(f"status.reservedFor[{i}] has no uid")
        out.append(
            ConsumerRef(
                resource=_str(r.get("resource")),
                name=_str(r.get("name")),
                uid=uid,
                api_group=_str(r.get("apiGroup")),
            )
        )
    return tuple(out)


def _device_statuses(value: Any, errors: list[str]) -> tuple[DeviceStatus, ...]:
    out: list[DeviceStatus] = []
    for i, raw in enumerate(_items(value, "status.devices", errors)):
        where = f"status.devices[{i}]"
        conditions = {
            _str(c.get("type")): _str(c.get("status"))
            for c in _items(raw.get("conditions"), f"{where}.conditions", errors)
            if _str(c.get("type"))
        }
        out.append(
            DeviceStatus(
                driver=_str(raw.get("driver")),
                pool=_str(raw.get("pool")),
                device=_str(raw.get("device")),
                share_id=_str(raw.get("shareID")),
                conditions=conditions,
            )
        )
    return tuple(out)


def resource_claim_from_k8s(obj: Mapping[str, Any]) -> ResourceClaim:
    """One ResourceClaim of resource.k8s.io/v1. Never raises (see `errors`); an allocation
    is kept even when parts of the spec are malformed, so its devices stay in use."""
    meta = _obj(obj.get("metadata"))
    spec = _obj(obj.get("spec"))
    status = _obj(obj.get("status"))
    devices = _obj(spec.get("devices"))
    errors: list[str] = []
    requests: list[DeviceRequest] = []
    names: set[str] = set()
    for i, raw in enumerate(_items(devices.get("requests"), "spec.devices.requests", errors)):
        request = _request(raw, f"spec.devices.requests[{i}]", errors)
        if request is None:
            continue
        if request.name in names:
            errors.append(
                f"spec.devices.requests[{i}]: request name {request.name!r} appears twice"
            )
            continue
        names.add(request.name)
        requests.append(request)
    constraints: list[DeviceConstraint] = []
    for i, raw in enumerate(_items(devices.get("constraints"), "spec.devices.constraints", errors)):
        constraint = _constraint(raw, f"spec.devices.constraints[{i}]", errors)
        if constraint is not None:
            constraints.append(constraint)
    owner = ""
    for ref in _items(meta.get("ownerReferences"), "metadata.ownerReferences", errors):
        if (
            ref.get("controller") is True
            and ref.get("kind") == "Pod"
            and ref.get("apiVersion") == "v1"
        ):
            owner = _str(ref.get("uid"))
    annotations = _obj(meta.get("annotations"))
    return ResourceClaim(
        namespace=_str(meta.get("namespace")),
        name=_str(meta.get("name")),
        uid=_str(meta.get("uid")),
        resource_version=_str(meta.get("resourceVersion")),
        requests=tuple(requests),
        constraints=tuple(constraints),
        config=_configs(devices.get("config"), "spec.devices.config", errors),
        allocation=_allocation(status.get("allocation"), errors),
        reserved_for=_consumers(status.get("reservedFor"), errors),
        deleting=meta.get("deletionTimestamp") is not None,
        owner_pod_uid=owner,
        errors=tuple(errors),
        finalizers=_strings(meta.get("finalizers"), "metadata.finalizers", errors),
        pod_claim_name=_str(annotations.get(ANN_POD_CLAIM_NAME)),
        device_statuses=_device_statuses(status.get("devices"), errors),
    )


# -- writing (the scheduler's status writes) ----------------------------------------------


def format_quantity(value: Decimal) -> str:
    """A Decimal as a Kubernetes quantity string the API server parses back exactly."""
    if value == value.to_integral_value():
        return str(int(value))
    milli = value * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return format(value, "f")


def _toleration_to_k8s(t: Toleration) -> dict[str, object]:
    out: dict[str, object] = {"operator": t.operator}
    if t.key:
        out["key"] = t.key
    if t.value:
        out["value"] = t.value
    if t.effect:
        out["effect"] = t.effect
    if t.toleration_seconds is not None:
        out["tolerationSeconds"] = t.toleration_seconds
    return out


def _result_to_k8s(r: DeviceResult) -> dict[str, object]:
    out: dict[str, object] = {
        "request": r.request,
        "driver": r.driver,
        "pool": r.pool,
        "device": r.device,
    }
    if r.admin_access:
        out["adminAccess"] = True
    if r.tolerations:
        out["tolerations"] = [_toleration_to_k8s(t) for t in r.tolerations]
    if r.binding_conditions:
        out["bindingConditions"] = list(r.binding_conditions)
    if r.binding_failure_conditions:
        out["bindingFailureConditions"] = list(r.binding_failure_conditions)
    if r.share_id:
        out["shareID"] = r.share_id
    if r.consumed_capacity:
        # Names in the driver's domain are written unqualified, the spelling a slice
        # normally publishes them in and kube's allocator writes (capacityNameForStatus):
        # kube-scheduler 1.36 and drivers look consumedCapacity up by that spelling, so a
        # qualified "gpu.nvidia.com/memory" went uncounted by kube-scheduler, which then
        # over-filled the shared device (tests/integration/test_dra.py).
        prefix = f"{r.driver}/"
        out["consumedCapacity"] = {
            k.removeprefix(prefix): format_quantity(v) for k, v in r.consumed_capacity.items()
        }
    return out


def allocation_to_k8s(allocation: AllocationResult) -> dict[str, object]:
    """status.allocation as the API takes it (the inverse of parsing it)."""
    devices: dict[str, object] = {"results": [_result_to_k8s(r) for r in allocation.results]}
    if allocation.config:
        devices["config"] = [dict(c) for c in allocation.config]
    out: dict[str, object] = {"devices": devices}
    if allocation.node_selector is not None:
        out["nodeSelector"] = dict(allocation.node_selector)
    if allocation.allocation_timestamp:
        out["allocationTimestamp"] = allocation.allocation_timestamp
    return out


def consumer_to_k8s(consumer: ConsumerRef) -> dict[str, object]:
    """One status.reservedFor entry."""
    out: dict[str, object] = {
        "resource": consumer.resource,
        "name": consumer.name,
        "uid": consumer.uid,
    }
    if consumer.api_group:
        out["apiGroup"] = consumer.api_group
    return out


def pod_consumer(name: str, uid: str) -> ConsumerRef:
    """The reservedFor entry of a pod (kube-scheduler's: apiGroup "", resource pods)."""
    return ConsumerRef(resource="pods", name=name, uid=uid)

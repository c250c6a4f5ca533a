"""An independent audit of Dynamic Resource Allocation state, read from the API's JSON.

Whoever allocated the claims (kube-scheduler, gpusched, a hand-written status), this module
reads every ResourceClaim, ResourceSlice, DeviceClass, Pod and Node and reports what breaks
the resource.k8s.io/v1 contract. It shares no code with the allocators it judges: it does
not import gpusched.dra, gpusched.plugins or gpusched.kube (an import-linter contract in
pyproject.toml holds it to that, as for diffcheck, whose quantity and node-selector helpers
it reuses); the caller hands it a ``get`` coroutine to read the API with. Written from the
API reference (k8s.io/api/resource/v1 types.go) rather than from either allocator.

Violations it finds (``Violation.kind``):

* ``double-allocation``: a device in the results of two claims (or twice in one), unless
  the device has ``allowMultipleAllocations``; then ``over-capacity`` if the claims'
  ``consumedCapacity`` summed per capacity exceeds the device's. Results with
  ``adminAccess`` do not count (admin access does not take the device).
* ``over-counter``: the counters (``consumesCounters``) of the allocated devices of a pool,
  summed per counter set and counter, above the pool's ``sharedCounters``; or consumption
  from a counter set or counter the pool does not define.
* ``unknown-device``: a result naming a driver, pool or device that is not in the pool's
  current generation (the highest generation among its slices).
* ``wrong-count``: results that do not answer the claim's requests: an ExactCount request
  with a different number of results (count defaults to 1), an All request with none, a
  ``firstAvailable`` request answered by results that do not all name one of its
  subrequests (``<request>/<subrequest>``) or by the wrong count for that subrequest, a
  result naming a request the claim does not have.
* ``constraint``: a ``matchAttribute`` constraint whose devices lack the attribute or
  disagree on its value, or a ``distinctAttribute`` one whose devices share a value (over
  the results of the constraint's requests, all requests when it names none; a
  subrequest's results count for its parent request).
* ``wrong-node``: a claim reserved for a pod bound to a node that the allocation's
  ``nodeSelector`` does not select, or whose allocated node-local device (a slice with
  ``spec.nodeName``) belongs to another node.
* ``unreserved``: a bound, Running pod one of whose claims (by ``resourceClaimName``, or
  the name in ``status.resourceClaimStatuses`` for a template, or the extended-resource
  claim of ``status.extendedResourceClaimStatus``) is missing, unallocated or not reserved
  for the pod's uid.
* ``unknown-class``: a request naming a DeviceClass that does not exist.

Not checked: the CEL selectors of classes and requests (evaluating CEL without a CEL
implementation of our own would be guesswork, and using gpusched.dra's would make the
audit depend on what it judges), capacity request policies' valid values, device taints
and binding conditions.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpusched.devcluster.diffcheck import node_selector_matches, quantity

JSON = dict[str, Any]
Getter = Callable[[str], Awaitable[JSON]]

RESOURCE_API = "/apis/resource.k8s.io/v1"
DeviceKey = tuple[str, str, str]  # driver, pool, device


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    subject: str  # "namespace/claim", "namespace/pod" or "driver/pool/device"
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.subject}: {self.message}"


@dataclass
class DraState:
    claims: list[JSON] = field(default_factory=list)
    slices: list[JSON] = field(default_factory=list)
    classes: list[JSON] = field(default_factory=list)
    pods: list[JSON] = field(default_factory=list)
    nodes: list[JSON] = field(default_factory=list)


async def read_state(get: Getter) -> DraState:
    """Every object the audit reads, listed with ``get`` (e.g. a bound Kube.get)."""

    async def items(path: str) -> list[JSON]:
        listing = await get(path)
        found: list[JSON] = listing.get("items") or []
        return found

    return DraState(
        claims=await items(f"{RESOURCE_API}/resourceclaims"),
        slices=await items(f"{RESOURCE_API}/resourceslices"),
        classes=await items(f"{RESOURCE_API}/deviceclasses"),
        pods=await items("/api/v1/pods"),
        nodes=await items("/api/v1/nodes"),
    )


async def audit(get: Getter) -> list[Violation]:
    return check(await read_state(get))


# -- reading ---------------------------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> JSON:
    return dict(obj.get("metadata") or {})


def _key(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _allocation(claim: Mapping[str, Any]) -> JSON | None:
    allocation = (claim.get("status") or {}).get("allocation")
    return dict(allocation) if allocation else None


def _results(claim: Mapping[str, Any]) -> list[JSON]:
    allocation = _allocation(claim) or {}
    return list((allocation.get("devices") or {}).get("results") or [])


def _device_key(result: Mapping[str, Any]) -> DeviceKey:
    return (
        str(result.get("driver", "")),
        str(result.get("pool", "")),
        str(result.get("device", "")),
    )


def _unqualified(name: str, driver: str) -> str:
    """Capacity and attribute names are qualified with the driver's domain when written
    unqualified; compare in the unqualified form for the device's own driver."""
    prefix = driver + "/"
    return name[len(prefix) :] if name.startswith(prefix) else name


@dataclass
class _Pool:
    generation: int = -1
    slices: list[JSON] = field(default_factory=list)
    devices: dict[str, tuple[JSON, JSON]] = field(default_factory=dict)  # name -> (device, slice)
    counters: dict[str, dict[str, Fraction]] = field(default_factory=dict)


def _pools(slices: Iterable[JSON]) -> dict[tuple[str, str], _Pool]:
    """Per (driver, pool): the slices of the current (highest) generation, their devices and
    shared counter sets."""
    pools: dict[tuple[str, str], _Pool] = defaultdict(_Pool)
    for s in slices:
        spec = s.get("spec") or {}
        pool_spec = spec.get("pool") or {}
        key = (str(spec.get("driver", "")), str(pool_spec.get("name", "")))
        generation = int(pool_spec.get("generation", 0))
        pool = pools[key]
        if generation > pool.generation:
            pool.generation = generation
            pool.slices = []
        if generation == pool.generation:
            pool.slices.append(s)
    for pool in pools.values():
        for s in pool.slices:
            spec = s.get("spec") or {}
            for device in spec.get("devices") or ():
                pool.devices[str(device.get("name", ""))] = (device, s)
            for counter_set in spec.get("sharedCounters") or ():
                pool.counters[str(counter_set.get("name", ""))] = {
                    str(k): quantity((v or {}).get("value", 0))
                    for k, v in (counter_set.get("counters") or {}).items()
                }
    return pools


def _pod_claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The ResourceClaim names a pod uses (templates resolved through its status)."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    generated = {
        str(s.get("name", "")): s.get("resourceClaimName")
        for s in status.get("resourceClaimStatuses") or ()
    }
    names: list[str] = []
    for ref in spec.get("resourceClaims") or ():
        direct = ref.get("resourceClaimName")
        if direct:
            names.append(str(direct))
        elif ref.get("resourceClaimTemplateName"):
            name = generated.get(str(ref.get("name", "")))
            # A template whose claim the controller has not created yet has no name; the
            # pod cannot be Running then, which `unreserved` reports with this marker.
            names.append(str(name) if name else f"<claim {ref.get('name')} not generated>")
    extended = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    if extended:
        names.append(str(extended))
    return names


def _show(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"


# -- the checks ------------------------------------------------------------------------------


def check(state: DraState) -> list[Violation]:
    pools = _pools(state.slices)
    out: list[Violation] = []
    out += check_devices(state, pools)
    out += check_counters(state, pools)
    for claim in state.claims:
        if _allocation(claim) is None:
            continue
        out += check_requests(claim, {str(_meta(c).get("name")) for c in state.classes})
        out += check_constraints(claim, pools)
    out += check_nodes(state, pools)
    out += check_pods(state)
    return out


def check_devices(state: DraState, pools: Mapping[tuple[str, str], _Pool]) -> list[Violation]:
    """Existence in the current pool generation, exclusivity, consumable capacity."""
    out: list[Violation] = []
    users: dict[DeviceKey, list[tuple[str, JSON]]] = defaultdict(list)
    for claim in state.claims:
        for result in _results(claim):
            key = _device_key(result)
            pool = pools.get(key[:2])
            if pool is None:
                out.append(
                    Violation(
                        "unknown-device",
                        _key(claim),
                        f"result {result.get('request')} names driver {key[0]} pool {key[1]}"
                        " which no ResourceSlice publishes",
                    )
                )
                continue
            if key[2] not in pool.devices:
                out.append(
                    Violation(
                        "unknown-device",
                        _key(claim),
                        f"result {result.get('request')} names device {key[2]} not in pool"
                        f" {key[1]} of {key[0]} at generation {pool.generation}",
                    )
                )
                continue
            if not result.get("adminAccess"):
                users[key].append((_key(claim), result))
    for key, holders in users.items():
        device, _slice = pools[key[:2]].devices[key[2]]
        subject = "/".join(key)
        if not device.get("allowMultipleAllocations"):
            if len(holders) > 1:
                claims = sorted({c for c, _ in holders})
                out.append(
                    Violation(
                        "double-allocation",
                        subject,
                        f"allocated {len(holders)} times, to {', '.join(claims)}",
                    )
                )
            continue
        capacity = {
            _unqualified(str(k), key[0]): quantity((v or {}).get("value", 0))
            for k, v in (device.get("capacity") or {}).items()
        }
        consumed: dict[str, Fraction] = defaultdict(Fraction)
        for _claim, result in holders:
            for name, value in (result.get("consumedCapacity") or {}).items():
                consumed[_unqualified(str(name), key[0])] += quantity(value)
        for name, total in sorted(consumed.items()):
            if name not in capacity:
                out.append(Violation("over-capacity", subject, f"consumes {name} it does not have"))
            elif total > capacity[name]:
                out.append(
                    Violation(
                        "over-capacity",
                        subject,
                        f"{name}: {len(holders)} allocations consume {_show(total)},"
                        f" capacity {_show(capacity[name])}",
                    )
                )
    return out


def check_counters(state: DraState, pools: Mapping[tuple[str, str], _Pool]) -> list[Violation]:
    """Each allocated device (once, however many claims share it) charges its
    consumesCounters against its pool's counter sets."""
    allocated: set[DeviceKey] = set()
    for claim in state.claims:
        for result in _results(claim):
            if not result.get("adminAccess"):
                allocated.add(_device_key(result))
    used: dict[tuple[str, str, str, str], Fraction] = defaultdict(Fraction)
    out: list[Violation] = []
    for key in sorted(allocated):
        pool = pools.get(key[:2])
        if pool is None or key[2] not in pool.devices:
            continue  # reported by check_devices
        device, _slice = pool.devices[key[2]]
        for consumption in device.get("consumesCounters") or ():
            counter_set = str(consumption.get("counterSet", ""))
            for name, value in (consumption.get("counters") or {}).items():
                used[(*key[:2], counter_set, str(name))] += quantity((value or {}).get("value", 0))
    for (driver, pool_name, counter_set, name), total in sorted(used.items()):
        available = pools[(driver, pool_name)].counters.get(counter_set)
        subject = f"{driver}/{pool_name}/{counter_set}"
        if available is None or name not in available:
            out.append(
                Violation("over-counter", subject, f"counter {name} is not defined in the pool")
            )
        elif total > available[name]:
            out.append(
                Violation(
                    "over-counter",
                    subject,
                    f"counter {name}: allocated devices consume {_show(total)},"
                    f" the set has {_show(available[name])}",
                )
            )
    return out


def _requests(claim: Mapping[str, Any]) -> list[JSON]:
    return list(((claim.get("spec") or {}).get("devices") or {}).get("requests") or [])


def _count_problem(exact: Mapping[str, Any], got: int) -> str | None:
    mode = exact.get("allocationMode") or "ExactCount"
    if mode == "All":
        return None if got >= 1 else "allocationMode All with no device"
    want = int(exact.get("count") or 1)
    return None if got == want else f"count {want}, {got} result(s)"


def check_requests(claim: Mapping[str, Any], classes: set[str]) -> list[Violation]:
    """The results answer the requests: names, counts, one subrequest per firstAvailable."""
    out: list[Violation] = []
    subject = _key(claim)
    per_request: dict[str, list[str]] = defaultdict(list)  # request -> subrequest names ("")
    for result in _results(claim):
        parent, _, sub = str(result.get("request", "")).partition("/")
        per_request[parent].append(sub)
    requests = {str(r.get("name", "")): r for r in _requests(claim)}
    for name in sorted(set(per_request) - set(requests)):
        out.append(Violation("wrong-count", subject, f"result for unknown request {name!r}"))
    for name, request in requests.items():
        got = per_request.get(name, [])
        exact = request.get("exactly")
        if exact is not None:
            cls = str(exact.get("deviceClassName", ""))
            if cls not in classes:
                out.append(Violation("unknown-class", subject, f"request {name}: class {cls}"))
            if any(got):
                out.append(Violation("wrong-count", subject, f"request {name} has no subrequests"))
            problem = _count_problem(exact, len(got))
            if problem:
                out.append(Violation("wrong-count", subject, f"request {name}: {problem}"))
            continue
        subrequests = {str(s.get("name", "")): s for s in request.get("firstAvailable") or ()}
        for subrequest in subrequests.values():
            cls = str(subrequest.get("deviceClassName", ""))
            if cls not in classes:
                out.append(
                    Violation(
                        "unknown-class", subject, f"request {name}/{subrequest.get('name')}: {cls}"
                    )
                )
        chosen = set(got)
        if len(chosen) != 1 or not chosen <= set(subrequests):
            out.append(
                Violation(
                    "wrong-count",
                    subject,
                    f"request {name}: results name subrequests {sorted(chosen)},"
                    f" want exactly one of {sorted(subrequests)}",
                )
            )
            continue
        [sub_name] = chosen
        problem = _count_problem(subrequests[sub_name], len(got))
        if problem:
            out.append(Violation("wrong-count", subject, f"request {name}/{sub_name}: {problem}"))
    return out


def _attribute(device: Mapping[str, Any], driver: str, name: str) -> object:
    """The typed value ({"string": ...}) of a fully qualified attribute, or None."""
    attributes = device.get("attributes") or {}
    if name in attributes:
        return attributes[name]
    domain, _, short = name.partition("/")
    if domain == driver and short in attributes:
        return attributes[short]
    return None


def check_constraints(
    claim: Mapping[str, Any], pools: Mapping[tuple[str, str], _Pool]
) -> list[Violation]:
    out: list[Violation] = []
    constraints = ((claim.get("spec") or {}).get("devices") or {}).get("constraints") or ()
    results = _results(claim)
    for constraint in constraints:
        names = set(constraint.get("requests") or ())

        def applies(result: Mapping[str, Any], names: set[str] = names) -> bool:
            request = str(result.get("request", ""))
            return not names or request in names or request.partition("/")[0] in names

        values: list[tuple[str, object]] = []
        attribute = constraint.get("matchAttribute") or constraint.get("distinctAttribute")
        if not attribute:
            continue
        for result in results:
            if not applies(result) or result.get("adminAccess"):
                continue
            key = _device_key(result)
            pool = pools.get(key[:2])
            if pool is None or key[2] not in pool.devices:
                continue  # reported by check_devices
            device, _slice = pool.devices[key[2]]
            values.append((key[2], _attribute(device, key[0], str(attribute))))
        subject = _key(claim)
        if constraint.get("matchAttribute"):
            missing = [d for d, v in values if v is None]
            distinct = {repr(v) for _d, v in values}
            if missing:
                out.append(
                    Violation(
                        "constraint", subject, f"matchAttribute {attribute}: {missing} lack it"
                    )
                )
            elif len(distinct) > 1:
                out.append(
                    Violation(
                        "constraint",
                        subject,
                        f"matchAttribute {attribute}: values differ {sorted(distinct)}",
                    )
                )
        else:
            seen = [repr(v) for _d, v in values]
            if len(set(seen)) != len(seen) or any(v is None for _d, v in values):
                out.append(
                    Violation(
                        "constraint",
                        subject,
                        f"distinctAttribute {attribute}: values {sorted(seen)}",
                    )
                )
    return out


def check_nodes(state: DraState, pools: Mapping[tuple[str, str], _Pool]) -> list[Violation]:
    """Pods a claim is reserved for sit where the allocation is usable."""
    nodes = {str(_meta(n).get("name")): n for n in state.nodes}
    pods = {str(_meta(p).get("uid")): p for p in state.pods}
    out: list[Violation] = []
    for claim in state.claims:
        allocation = _allocation(claim)
        if allocation is None:
            continue
        local_nodes = set()
        for result in _results(claim):
            key = _device_key(result)
            pool = pools.get(key[:2])
            if pool is not None and key[2] in pool.devices:
                node_name = (pool.devices[key[2]][1].get("spec") or {}).get("nodeName")
                if node_name:
                    local_nodes.add(str(node_name))
        for consumer in (claim.get("status") or {}).get("reservedFor") or ():
            if consumer.get("resource") != "pods":
                continue
            pod = pods.get(str(consumer.get("uid", "")))
            if pod is None:
                continue  # gone; the resourceclaim controller removes the entry
            bound = str((pod.get("spec") or {}).get("nodeName") or "")
            if not bound:
                continue
            node = nodes.get(bound, {"metadata": {"name": bound}})
            if not node_selector_matches(allocation.get("nodeSelector"), node):
                out.append(
                    Violation(
                        "wrong-node",
                        _key(claim),
                        f"reserved for pod {_key(pod)} on {bound}, which the allocation's"
                        " nodeSelector does not select",
                    )
                )
            elif local_nodes - {bound}:
                out.append(
                    Violation(
                        "wrong-node",
                        _key(claim),
                        f"pod {_key(pod)} on {bound} holds devices of {sorted(local_nodes)}",
                    )
                )
    return out


def check_pods(state: DraState) -> list[Violation]:
    claims = {_key(c): c for c in state.claims}
    out: list[Violation] = []
    for pod in state.pods:
        status = pod.get("status") or {}
        if not (pod.get("spec") or {}).get("nodeName") or status.get("phase") != "Running":
            continue
        namespace = str(_meta(pod).get("namespace", ""))
        uid = str(_meta(pod).get("uid", ""))
        for name in _pod_claim_names(pod):
            claim = claims.get(f"{namespace}/{name}")
            if claim is None:
                out.append(Violation("unreserved", _key(pod), f"claim {name} does not exist"))
                continue
            if _allocation(claim) is None:
                out.append(Violation("unreserved", _key(pod), f"claim {name} is not allocated"))
                continue
            reserved = {
                str(c.get("uid", ""))
                for c in (claim.get("status") or {}).get("reservedFor") or ()
                if c.get("resource") == "pods"
            }
            if uid not in reserved:
                out.append(
                    Violation("unreserved", _key(pod), f"claim {name} is not reserved for it")
                )
    return out

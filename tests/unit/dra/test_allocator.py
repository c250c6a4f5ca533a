"""The structured allocator against cases of kube's allocator tests
(staging/src/k8s.io/dynamic-resource-allocation/structured/internal/allocatortesting/
allocator_testing.go; the tests named like kube's cases port them) and the features kube
tests elsewhere: counters, consumable capacity, taints, prioritized lists, constraints,
pool generations, and a search that must stay bounded.

CEL is faked: a few fixed expressions mapped to Python predicates, so these tests do not
depend on gpusched.dra.cel."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest

from gpusched.dra.allocator import (
    CANNOT_ALLOCATE,
    INVALID_POOLS,
    TIMED_OUT,
    AllocationFailure,
    Allocator,
    FailureKind,
    InUse,
    Node,
    SliceIndex,
    consumed_capacity,
    in_use_from_claims,
)
from gpusched.model.dra import (
    AllocationMode,
    AllocationResult,
    Attribute,
    AttributeKind,
    Capacity,
    CapacityPolicy,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    DeviceResult,
    DeviceSubRequest,
    DeviceTaint,
    ResourceClaim,
    ResourceSlice,
    Toleration,
)

DRIVER_A, DRIVER_B = "driver-a", "driver-b"
CLASS_A, CLASS_B = "class-a", "class-b"
NODE1, NODE2 = "node-1", "node-2"
GI = Decimal(2**30)


# -- a fake CEL evaluator ------------------------------------------------------------------


@dataclass(frozen=True)
class FakeCelError:
    message: str


@dataclass(frozen=True)
class Compiled:
    expr: str


_DRIVER_EXPR = re.compile(r'device\.driver == "([^"]+)"\Z')


def _mem_at_least(gib: int) -> Callable[[str, Device], bool]:
    def check(driver: str, d: Device) -> bool:
        cap = d.capacity.get(f"{driver}/memory")
        return cap is not None and cap.value >= gib * GI

    return check


PREDICATES: dict[str, Callable[[str, Device], bool]] = {
    "mem >= 1Gi": _mem_at_least(1),
    "mem >= 2Gi": _mem_at_least(2),
    "is-gpu": lambda driver, d: d.attributes.get(f"{driver}/type") == str_attr("gpu"),
    "multi": lambda _driver, d: d.allow_multiple_allocations,
}


class FakeSelectors:
    """`device.driver == "x"`, the PREDICATES above, "noSuchVar" (a compile error) and
    "boom" (a runtime error)."""

    def __init__(self) -> None:
        self.evaluations = 0

    def compile(self, expr: str) -> Compiled | FakeCelError:
        if expr == "noSuchVar":
            return FakeCelError("undeclared reference to 'noSuchVar'")
        if expr == "boom" or expr in PREDICATES or _DRIVER_EXPR.match(expr):
            return Compiled(expr)
        return FakeCelError(f"unknown expression {expr!r}")

    def matches(self, compiled: Compiled, driver: str, device: Device) -> bool | FakeCelError:
        self.evaluations += 1
        if compiled.expr == "boom":
            return FakeCelError("no such key: foo")
        m = _DRIVER_EXPR.match(compiled.expr)
        if m:
            return driver == m.group(1)
        return PREDICATES[compiled.expr](driver, device)


# -- builders --------------------------------------------------------------------------------


def int_attr(v: int) -> Attribute:
    return Attribute(AttributeKind.INT, v)


def str_attr(v: str) -> Attribute:
    return Attribute(AttributeKind.STRING, v)


def ver_attr(v: str) -> Attribute:
    return Attribute(AttributeKind.VERSION, v)


def bool_attr(v: bool) -> Attribute:
    return Attribute(AttributeKind.BOOL, v)


def dev(name: str, driver: str = DRIVER_A, **kw: Any) -> Device:
    attrs = {f"{driver}/{k}": v for k, v in (kw.pop("attrs", None) or {}).items()}
    caps = {f"{driver}/{k}": v for k, v in (kw.pop("caps", None) or {}).items()}
    return Device(name=name, attributes=attrs, capacity=caps, **kw)


def mem(gib: int) -> dict[str, Capacity]:
    return {"memory": Capacity(gib * GI)}


def rslice(
    name: str,
    node: str,
    pool: str,
    driver: str,
    *devices: Device,
    gen: int = 1,
    count: int = 1,
    **kw: Any,
) -> ResourceSlice:
    return ResourceSlice(
        name=name,
        driver=driver,
        pool=pool,
        pool_generation=gen,
        pool_slice_count=count,
        node_name=node,
        devices=devices,
        **kw,
    )


def one_device(name: str, node: str, pool: str, driver: str, **kw: Any) -> ResourceSlice:
    return rslice(name, node, pool, driver, dev("device-1", driver), **kw)


def dclass(name: str, driver: str, config: tuple[Mapping[str, object], ...] = ()) -> DeviceClass:
    return DeviceClass(name=name, selectors=(f'device.driver == "{driver}"',), config=config)


def sub(name: str, cls: str, count: int = 1, **kw: Any) -> DeviceSubRequest:
    return DeviceSubRequest(name=name, device_class=cls, count=count, **kw)


def req(name: str, cls: str, count: int = 1, **kw: Any) -> DeviceRequest:
    return DeviceRequest(name=name, alternatives=(sub(name, cls, count, **kw),))


def prio(name: str, *subs: DeviceSubRequest) -> DeviceRequest:
    return DeviceRequest(name=name, alternatives=subs, first_available=True)


def claim(name: str, *requests: DeviceRequest, **kw: Any) -> ResourceClaim:
    return ResourceClaim(namespace="", name=name, uid=f"uid-{name}", requests=requests, **kw)


def local(node: str) -> dict[str, object]:
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }


def node(name: str = NODE1, region: str = "region-1") -> Node:
    return Node(name, {"region": region, "planet": "earth"})


def result(request: str, driver: str, pool: str, device: str, **kw: Any) -> DeviceResult:
    return DeviceResult(request=request, driver=driver, pool=pool, device=device, **kw)


def allocate(
    claims: list[ResourceClaim],
    classes: list[DeviceClass],
    slices: list[ResourceSlice],
    at: Node | None = None,
    in_use: InUse | None = None,
    **kw: Any,
) -> tuple[AllocationResult, ...] | AllocationFailure:
    prefer = kw.pop("prefer", None)
    shares = iter(f"share-{i}" for i in range(1000))
    allocator = Allocator(
        {c.name: c for c in classes},
        SliceIndex(slices),
        in_use or InUse(),
        FakeSelectors(),
        new_share_id=lambda: next(shares),
        **kw,
    )
    return allocator.allocate(at or node(), claims, prefer)


def devices_of(got: tuple[AllocationResult, ...] | AllocationFailure) -> list[list[DeviceResult]]:
    assert not isinstance(got, AllocationFailure), got
    return [list(a.results) for a in got]


def failure(got: object) -> AllocationFailure:
    assert isinstance(got, AllocationFailure), got
    return got


CLASSES = [dclass(CLASS_A, DRIVER_A), dclass(CLASS_B, DRIVER_B)]


# -- kube's allocator cases ------------------------------------------------------------------


def test_simple() -> None:
    got = allocate(
        [claim("claim-0", req("req-0", CLASS_A))],
        CLASSES,
        [one_device("slice-1", NODE1, "pool-1", DRIVER_A)],
    )
    assert not isinstance(got, AllocationFailure)
    assert got == (
        AllocationResult(
            results=(result("req-0", DRIVER_A, "pool-1", "device-1"),), node_selector=local(NODE1)
        ),
    )


def test_other_node() -> None:
    got = allocate(
        [claim("claim-0", req("req-0", CLASS_A))],
        CLASSES,
        [
            one_device("slice-1", NODE1, "pool-1", DRIVER_B),
            one_device("slice-2", NODE2, "pool-2", DRIVER_A),
        ],
        at=node(NODE2, "region-2"),
    )
    assert not isinstance(got, AllocationFailure)
    assert got[0].results == (result("req-0", DRIVER_A, "pool-2", "device-1"),)
    assert got[0].node_selector == local(NODE2)


def _small_and_large(claims: list[ResourceClaim]) -> list[list[DeviceResult]]:
    # The large device listed first: the small request takes it at first and the search has
    # to undo that.
    return devices_of(
        allocate(
            claims,
            CLASSES,
            [
                rslice(
                    "slice-1",
                    NODE1,
                    "pool-1",
                    DRIVER_A,
                    dev("device-2", caps=mem(2)),
                    dev("device-1", caps=mem(1)),
                )
            ],
        )
    )


def test_small_and_large_backtrack_requests() -> None:
    got = _small_and_large(
        [
            claim(
                "claim-0",
                req("req-0", CLASS_A, selectors=("mem >= 1Gi",)),
                req("req-1", CLASS_A, selectors=("mem >= 2Gi",)),
            )
        ]
    )
    assert got == [
        [
            result("req-0", DRIVER_A, "pool-1", "device-1"),
            result("req-1", DRIVER_A, "pool-1", "device-2"),
        ]
    ]


def test_small_and_large_backtrack_claims() -> None:
    got = _small_and_large(
        [
            claim("claim-0", req("req-0", CLASS_A, selectors=("mem >= 1Gi",))),
            claim("claim-1", req("req-1", CLASS_A, selectors=("mem >= 2Gi",))),
        ]
    )
    assert got == [
        [result("req-0", DRIVER_A, "pool-1", "device-1")],
        [result("req-1", DRIVER_A, "pool-1", "device-2")],
    ]


def test_devices_split_across_different_slices() -> None:
    got = devices_of(
        allocate(
            [claim("claim-0", req("req-0", CLASS_A, 2))],
            CLASSES,
            [
                one_device("slice-1", NODE1, "pool-1", DRIVER_A),
                one_device("slice-2", NODE1, "pool-2", DRIVER_A),
            ],
        )
    )
    assert got == [
        [
            result("req-0", DRIVER_A, "pool-1", "device-1"),
            result("req-0", DRIVER_A, "pool-2", "device-1"),
        ]
    ]


def test_obsolete_slice() -> None:
    # The newer generation has one of its two slices: incomplete, so nothing is allocated
    # (and the old generation's device does not count any more).
    got = allocate(
        [claim("claim-0", req("req-0", CLASS_A))],
        CLASSES,
        [
            rslice("slice-1-old", NODE1, "pool-1", DRIVER_A, dev("device-1"), count=2),
            rslice("slice-1-new", NODE1, "pool-1", DRIVER_A, dev("device-2"), count=2, gen=2),
        ],
    )
    assert failure(got) == AllocationFailure(CANNOT_ALLOCATE)


def test_duplicate_slice() -> None:
    a = rslice("slice-1", NODE1, "pool-1", DRIVER_A, dev("device-1"), count=2)
    b = rslice("slice-1-2", NODE1, "pool-1", DRIVER_A, dev("device-1"), count=2)
    got = allocate([claim("claim-0", req("req-0", CLASS_A))], CLASSES, [a, b])
    assert failure(got) == AllocationFailure(INVALID_POOLS, FailureKind.UNSCHEDULABLE)


def test_invalid_pool_does_not_stop_a_valid_one() -> None:
    bad_a = rslice("slice-1", NODE1, "pool-1", DRIVER_A, dev("device-1"), count=2)
    bad_b = rslice("slice-1-2", NODE1, "pool-1", DRIVER_A, dev("device-1"), count=2)
    good = one_device("slice-2", NODE1, "pool-2", DRIVER_A)
    got = devices_of(
        allocate([claim("claim-0", req("req-0", CLASS_A))], CLASSES, [bad_a, bad_b, good])
    )
    assert got == [[result("req-0", DRIVER_A, "pool-2", "device-1")]]


def test_no_slices() -> None:
    got = allocate([claim("claim-0", req("req-0", CLASS_A))], CLASSES, [])
    assert failure(got).message == "cannot allocate all claims"


def test_not_enough_suitable_devices() -> None:
    got = allocate(
        [claim("claim-0", req("req-0", CLASS_A)), claim("claim-0", req("req-1", CLASS_A))],
        CLASSES,
        [one_device("slice-1", NODE1, "pool-1", DRIVER_A)],
    )
    assert failure(got) == AllocationFailure(CANNOT_ALLOCATE)


def test_unknown_class() -> None:
    got = failure(
        allocate(
            [claim("claim-0", req("req-0", "unknown-class"))],
            CLASSES,
            [one_device("slice-1", NODE1, "pool-1", DRIVER_A)],
        )
    )
    assert got.kind is FailureKind.ERROR
    assert "could not retrieve device class unknown-class" in got.message


def test_empty_class() -> None:
    got = failure(
        allocate(
            [claim("claim-0", req("req-0", ""))],
            CLASSES,
            [one_device("slice-1", NODE1, "pool-1", DRIVER_A)],
        )
    )
    assert got == AllocationFailure(
        "claim claim-0, request req-0: missing device class name (unsupported request type?)",
        FailureKind.ERROR,
    )


def test_no_claims_to_allocate() -> None:
    assert allocate([], CLASSES, [one_device("slice-1", NODE1, "pool-1", DRIVER_A)]) == ()


def _all(name: str, cls: str) -> DeviceRequest:
    return req(name, cls, 0, mode=AllocationMode.ALL)


def test_all_devices_single() -> None:
    got = devices_of(
        allocate(
            [claim("claim-0", _all("req-0", CLASS_A))],
            CLASSES,
            [one_device("slice-1", NODE1, "pool-1", DRIVER_A)],
        )
    )
    assert got == [[result("req-0", DRIVER_A, "pool-1", "device-1")]]


def test_all_devices_many_plus_another() -> None:
    got = devices_of(
        allocate(
            [claim("claim-0", _all("req-0", CLASS_A)), claim("claim-1", req("req-0", CLASS_B))],
            CLASSES,
            [
                rslice("slice-1", NODE1, "pool-1", DRIVER_A, dev("device-1"), dev("device-2")),
                one_device("slice-1", NODE1, "pool-1", DRIVER_B),
            ],
        )
    )
    assert got == [
        [
            result("req-0", DRIVER_A, "pool-1", "device-1"),
            result("req-0", DRIVER_A, "pool-1", "device-2"),
        ],
        [result("req-0", DRIVER_B, "pool-1", "device-1")],
    ]


def test_all_devices_of_the_incomplete_pool() -> None:
    got = failure(
        allocate(
            [claim("claim-0", _all("req-0", CLASS_A))],
            CLASSES,
            [one_device("slice-1", NODE1, "pool-1", DRIVER_A, count=2)],
        )
    )
    assert got == AllocationFailure(
        "claim claim-0, request req-0: asks for all devices, but resource pool"
        " driver-a/pool-1 is currently being updated",
        FailureKind.ERROR,
    )


def test_all_devices_none_there() -> None:
    # "All" needs at least one device: none is "cannot allocate", not an empty result.
    got = allocate(
        [claim("claim-0", _all("req-0", CLASS_B))],
        CLASSES,
        [one_device("slice-1", NODE1, "pool-1", DRIVER_A)],
    )
    assert failure(got) == AllocationFailure(CANNOT_ALLOCATE)


def test_all_devices_one_in_use() -> None:
    # "All" takes every matching device, so one held by another claim makes it impossible.
    got = allocate(
        [claim("claim-0", _all("req-0", CLASS_A))],
        CLASSES,
        [rslice("slice-1", NODE1, "pool-1", DRIVER_A, dev("device-1"), dev("device-2"))],
        in_use=InUse(devices=frozenset({(DRIVER_A, "pool-1", "device-2")})),
    )
    assert failure(got) == AllocationFailure(CANNOT_ALLOCATE)


def test_admin_access_enabled() -> None:
    held = frozenset({(DRIVER_A, "pool-1", "device-1"), (DRIVER_A, "pool-1", "device-2")})
    got = devices_of(
        allocate(
            [claim("claim-0", req("req-0", CLASS_A, admin_access=True))],
            CLASSES,
            [one_device("slice-1", NODE1, "pool-1", DRIVER_A)],
            in_use=InUse(devices=held),
        )
    )
    assert got == [[result("req-0", DRIVER_A, "pool-1", "device-1", admin_access=True)]]


def test_in_use_device_is_skipped() -> None:
    got = devices_of(
        allocate(
            [claim("claim-0", req("req-0", CLASS_A))],
            CLASSES,
            [rslice("slice-1", NODE1, "pool-1", DRIVER_A, dev("device-1"), dev("device-2"))],
            in_use=InUse(devices=frozenset({(DRIVER_A, "pool-1", "device-1")})),
        )
    )
    assert got == [[result("req-0", DRIVER_A, "pool-1", "device-2")]]


# -- constraints -----------------------------------------------------------------------------

_FULL = {
    "driverVersion": ver_attr("1.0.0"),
    "numa": int_attr(1),
    "stringAttribute": str_attr("stringAttributeValue"),
    "boolAttribute": bool_attr(True),
}


def _attr(name: str) -> str:
    return f"{DRIVER_A}/{name}"


def test_with_constraint() -> None:
    constraints = tuple(
        DeviceConstraint(match_attribute=_attr(a))
        for a in ("numa", "driverVersion", "stringAttribute", "boolAttribute")
    )
    got = devices_of(
        allocate(
            [
                claim(
                    "claim-0",
                    req("req-0", CLASS_A),
                    req("req-1", CLASS_A),
                    constraints=constraints,
                )
            ],
            CLASSES,
            [
                rslice(
                    "slice-1",
                    NODE1,
                    "pool-1",
                    DRIVER_A,
                    dev("device-1", attrs=_FULL),
                    dev("device-2", attrs=_FULL),
                )
            ],
        )
    )
    assert [r.device for r in got[0]] == ["device-1", "device-2"]


def test_with_constraint_non_existent_attribute() -> None:
    got = allocate(
        [
            claim(
                "claim-0",
                req("req-0", CLASS_A),
                constraints=(DeviceConstraint(match_attribute=_attr("noSuchAttribute")),),
            )
        ],
        CLASSES,
        [one_device("slice-1", NODE1, "pool-1", DRIVER_A)],
    )
    assert failure(got) == AllocationFailure(CANNOT_ALLOCATE)


@pytest.mark.parametrize(
    ("name", "a", "b"),
    [
        ("numa", int_attr(1), int_attr(2)),
        ("stringAttribute", str_attr("stringAttributeValue"), str_attr("stringAttributeValue2")),
        ("boolAttribute", bool_attr(True), bool_attr(False)),
        ("driverVersion", ver_attr("1.0.0"), ver_attr("2.0.0")),
    ],
)
def test_with_constraint_not_matching_attribute(name: str, a: Attribute, b: Attribute) -> None:
    got = allocate(
        [
            claim(
                "claim-0",
                req("req-0", CLASS_A, 2),
                constraints=(DeviceConstraint(match_attribute=_attr(name)),),
            )
        ],
        CLASSES,
        [
            rslice(
                "slice-1",
                NODE1,
                "pool-1",
                DRIVER_A,
                dev("device-1", attrs={name: a}),
                dev("device-2", attrs={name: b}),
            )
        ],
    )
    assert failure(got) == AllocationFailure(CANNOT_ALLOCATE)


def test_with_constraint_not_matching_int_attribute_all_devices() -> None:
    got = failure(
        allocate(
            [
                claim(
                    "claim-0",
                    _all("req-0", CLASS_A),
                    constraints=(DeviceConstraint(match_attribute=_attr("numa")),),
                )
            ],
            CLASSES,
            [
                rslice(
                    "slice-1",
                    NODE1,
                    "pool-1",
                    DRIVER_A,
                    dev("device-1", attrs={"numa": int_attr(1)}),
                    dev("device-2", attrs={"numa": int_attr(2)}),
                )
            ],
        )
    )
    assert got == AllocationFailure(
        "claim claim-0, request req-0: cannot add device driver-a/pool-1/device-2 because a"
        " claim constraint would not be satisfied",
        FailureKind.ERROR,
    )


def test_with_constraint_for_request_retry() -> None:
    # device-1 satisfies the first constraint but not the second: backtrack.
    got = devices_of(
        allocate(
            [
                claim(
                    "claim-0",
                    req("req-0", CLASS_A),
                    req("req-1", CLASS_A),
                    constraints=(
                        DeviceConstraint(
                            requests=("req-0",), match_attribute=_attr("driverVersion")
                        ),
                        DeviceConstraint(match_attribute=_attr("stringAttribute")),
                    ),
                )
            ],
            CLASSES,
            [
                rslice(
                    "slice-1",
                    NODE1,
                    "pool-1",
                    DRIVER_A,
                    dev(
                        "device-1",
                        attrs={
                            "driverVersion": ver_attr("1.0.0"),
                            "stringAttribute": str_attr("a"),
                        },
                    ),
                    dev(
                        "device-2",
                        attrs={
                            "driverVersion": ver_attr("2.0.0"),
                            "stringAttribute": str_attr("b"),
                        },
                    ),
                    dev(
                        "device-3",
                        attrs={
                            "driverVersion": ver_attr("3.0.0"),
                            "stringAttribute": str_attr("b"),
                        },
                    ),
                )
            ],
        )
    )
    assert [(r.request, r.device) for r in got[0]] == [("req-0", "device-2"), ("req-1", "device-3")]


def test_distinct_attribute() -> None:
    devices = [dev(f"device-{i}", attrs={"numa": int_attr(i // 2)}) for i in range(4)]
    got = devices_of(
        allocate(
            [
                claim(
                    "claim-0",
                    req("req-0", CLASS_A, 2),
                    constraints=(DeviceConstraint(distinct_attribute=_attr("numa")),),
                )
            ],
            CLASSES,
            [rslice("slice-1", NODE1, "pool-1", DRIVER_A, *devices)],
        )
    )
    # device-1 shares numa 0 with device-0; device-2 is the first with another one.
    assert [r.device for r in got[0]] == ["device-0", "device-2"]


def test_constraint_ignores_other_requests() -> None:
    got = devices_of(
        allocate(
            [
                claim(
                    "claim-0",
                    req("req-0", CLASS_A),
                    req("req-1", CLASS_A),
                    constraints=(
                        DeviceConstraint(requests=("req-0",), match_attribute=_attr("numa")),
                    ),
                )
            ],
            CLASSES,
            [
                rslice(
                    "slice-1",
                    NODE1,
                    "pool-1",
                    DRIVER_A,
                    dev("device-1", attrs={"numa": int_attr(1)}),
                    dev("device-2"),  # no numa: fine for req-1, which the constraint skips
                )
            ],
        )
    )
    assert [r.device for r in got[0]] == ["device-1", "device-2"]


# -- configs ---------------------------------------------------------------------------------


def _opaque(driver: str, attribute: str) -> dict[str, object]:
    return {"opaque": {"driver": driver, "parameters": {attribute: attribute + "Value"}}}


def test_with_class_device_config() -> None:
    got = allocate(
        [claim("claim-0", req("req-0", CLASS_A))],
        [dclass(CLASS_A, DRIVER_A, (_opaque(DRIVER_A, "classAttribute"),))],
        [one_device("slice-1", NODE1, "pool-1", DRIVER_A)],
    )
    assert not isinstance(got, AllocationFailure)
    # One request, named: "empty means all" would say the same; kube clears it.
    assert got[0].config == ({**_opaque(DRIVER_A, "classAttribute"), "source": "FromClass"},)


def test_with_class_device_config_with_multiple_request_and_configs() -> None:
    got = allocate(
        [
            claim(
                "claim-0",
                req("req-0", CLASS_A),
                req("req-1", CLASS_A),
                req("req-2", CLASS_B),
            )
        ],
        [
            dclass(CLASS_A, DRIVER_A, (_opaque(DRIVER_A, "classAttribute-A"),)),
            dclass(CLASS_B, DRIVER_B, (_opaque(DRIVER_B, "classAttribute-B"),)),
        ],
        [
            rslice("slice-1", NODE1, "pool-1", DRIVER_A, dev("device-0"), dev("device-1")),
            one_device("slice-2", NODE1, "pool-1", DRIVER_B),
        ],
    )
    assert not isinstance(got, AllocationFailure)
    assert [(r.request, r.driver, r.device) for r in got[0].results] == [
        ("req-0", DRIVER_A, "device-0"),
        ("req-1", DRIVER_A, "device-1"),
        ("req-2", DRIVER_B, "device-1"),
    ]
    assert got[0].config == (
        {
            **_opaque(DRIVER_A, "classAttribute-A"),
            "source": "FromClass",
            "requests": ["req-0", "req-1"],
        },
        {**_opaque(DRIVER_B, "classAttribute-B"), "source": "FromClass", "requests": ["req-2"]},
    )


def test_claim_with_device_config() -> None:
    got = allocate(
        [claim("claim-0", req("req-0", CLASS_A), config=(_opaque(DRIVER_A, "deviceAttribute"),))],
        CLASSES,
        [one_device("slice-1", NODE1, "pool-1", DRIVER_A)],
    )
    assert not isinstance(got, AllocationFailure)
    assert got[0].config == ({**_opaque(DRIVER_A, "deviceAttribute"), "source": "FromClaim"},)


# -- bad input -------------------------------------------------------------------------------


def test_unknown_constraint() -> None:
    got = failure(
        allocate(
            [claim("claim-0", req("req-0", CLASS_A), constraints=(DeviceConstraint(),))],
            CLASSES,
            [one_device("slice-1", NODE1, "pool-1", DRIVER_A)],
        )
    )
    assert got.kind is FailureKind.ERROR
    assert "empty constraint (unsupported constraint type?)" in got.message


def test_unknown_selector() -> None:
    got = failure(
        allocate(
            [claim("claim-0", req("req-0", CLASS_A, selectors=("",)))],
            CLASSES,
            [one_device("slice-1", NODE1, "pool-1", DRIVER_A)],
        )
    )
    assert "CEL expression empty (unsupported selector type?)" in got.message


def test_invalid_cel_one_device() -> None:
    got = failure(
        allocate(
            [claim("claim-0", req("req-0", CLASS_A, selectors=("noSuchVar",)))],
            CLASSES,
            [one_device("slice-1", NODE1, "pool-1", DRIVER_A)],
        )
    )
    assert got == AllocationFailure(
        "claim claim-0: selector #0: CEL compile error: undeclared reference to 'noSuchVar'",
        FailureKind.ERROR,
    )


def test_invalid_cel_one_device_class() -> None:
    broken = DeviceClass(name=CLASS_A, selectors=("noSuchVar",))
    got = failure(
        allocate(
            [claim("claim-0", req("req-0", CLASS_A))],
            [broken],
            [one_device("slice-1", NODE1, "pool-1", DRIVER_A)],
        )
    )
    assert got.message == (
        "class class-a: selector #0: CEL compile error: undeclared reference to 'noSuchVar'"
    )


def test_cel_runtime_error() -> None:
    got = failure(
        allocate(
            [claim("claim-0", req("req-0", CLASS_A, selectors=("boom",)))],
            CLASSES,
            [one_device("slice-1", NODE1, "pool-1", DRIVER_A)],
        )
    )
    assert got == AllocationFailure(
        "claim claim-0: selector #0 on device driver-a/pool-1/device-1: CEL runtime error:"
        " no such key: foo",
        FailureKind.ERROR,
    )


def test_too_many_devices_single_request() -> None:
    got = failure(allocate([claim("claim-0", req("req-0", CLASS_A, 500))], CLASSES, []))
    assert got == AllocationFailure(
        "claim claim-0: number of requested devices 500 exceeds the claim limit of 32",
        FailureKind.ERROR,
    )


def test_malformed_claim_is_an_error_not_an_exception() -> None:
    bad = ResourceClaim(namespace="ns", name="c", uid="u", errors=("spec.devices: bad",))
    got = failure(allocate([bad], CLASSES, []))
    assert got == AllocationFailure("claim ns/c: spec.devices: bad", FailureKind.ERROR)


def test_malformed_slice_makes_its_pool_invalid() -> None:
    broken = ResourceSlice(
        name="s",
        driver=DRIVER_A,
        pool="pool-1",
        pool_generation=1,
        pool_slice_count=1,
        node_name=NODE1,
        devices=(dev("device-1"),),
        errors=("spec.devices[0].name: bad",),
    )
    got = allocate([claim("claim-0", req("req-0", CLASS_A))], CLASSES, [broken])
    assert failure(got) == AllocationFailure(INVALID_POOLS)


def test_malformed_node_selector_is_an_error() -> None:
    s = rslice(
        "slice-1",
        "",
        "pool-1",
        DRIVER_A,
        dev("device-1"),
        node_selector={
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Is"}]}]
        },
    )
    got = failure(allocate([claim("claim-0", req("req-0", CLASS_A))], CLASSES, [s]))
    assert got.kind is FailureKind.ERROR
    assert got.message.startswith("gather pool information: failed to perform node selection")


# -- node selection --------------------------------------------------------------------------

_REGION1 = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "region", "operator": "In", "values": ["region-1"]}]}
    ]
}


def test_network_attached_device_selector() -> None:
    s = rslice("slice-1", "", "pool-1", DRIVER_A, dev("device-1"), node_selector=_REGION1)
    claims = [claim("claim-0", req("req-0", CLASS_A))]
    got = allocate(claims, CLASSES, [s])
    assert not isinstance(got, AllocationFailure)
    assert got[0].node_selector == _REGION1
    assert failure(allocate(claims, CLASSES, [s], at=node(NODE2, "region-2"))) == (
        AllocationFailure(CANNOT_ALLOCATE)
    )


def test_all_nodes_device_has_no_node_selector() -> None:
    s = rslice("slice-1", "", "pool-1", DRIVER_A, dev("device-1"), all_nodes=True)
    got = allocate([claim("claim-0", req("req-0", CLASS_A))], CLASSES, [s], at=node(NODE2))
    assert not isinstance(got, AllocationFailure)
    assert got[0].node_selector is None


def test_per_device_node_selection() -> None:
    s = rslice(
        "slice-1",
        "",
        "pool-1",
        DRIVER_A,
        dev("device-1", node_name=NODE2),
        dev("device-2", node_name=NODE1),
        dev("device-3", all_nodes=True),
        per_device_node_selection=True,
    )
    got = allocate([claim("claim-0", req("req-0", CLASS_A, 2))], CLASSES, [s])
    assert not isinstance(got, AllocationFailure)
    assert [r.device for r in got[0].results] == ["device-2", "device-3"]
    assert got[0].node_selector == local(NODE1)  # device-2 is local to node-1


def test_binds_to_node_pins_to_the_node() -> None:
    s = rslice(
        "slice-1", "", "pool-1", DRIVER_A, dev("device-1", binds_to_node=True), all_nodes=True
    )
    got = allocate([claim("claim-0", req("req-0", CLASS_A))], CLASSES, [s])
    assert not isinstance(got, AllocationFailure)
    assert got[0].node_selector == local(NODE1)


def test_binding_conditions_pool_comes_last_and_results_carry_them() -> None:
    waiting = rslice(
        "slice-a",
        NODE1,
        "pool-a",
        DRIVER_A,
        dev("device-1", binding_conditions=("attached",), binding_failure_conditions=("failed",)),
    )
    plain = one_device("slice-z", NODE1, "pool-z", DRIVER_A)
    got = devices_of(
        allocate([claim("claim-0", req("req-0", CLASS_A, 2))], CLASSES, [waiting, plain])
    )
    assert [(r.pool, r.binding_conditions) for r in got[0]] == [
        ("pool-z", ()),
        ("pool-a", ("attached",)),
    ]
    assert got[0][1].binding_failure_conditions == ("failed",)


# -- pools -----------------------------------------------------------------------------------


def test_incomplete_pool_is_skipped_for_exact_count() -> None:
    got = devices_of(
        allocate(
            [claim("claim-0", req("req-0", CLASS_A))],
            CLASSES,
            [
                one_device("slice-1", NODE1, "pool-1", DRIVER_A, count=2),
                one_device("slice-2", NODE1, "pool-2", DRIVER_A),
            ],
        )
    )
    assert got == [[result("req-0", DRIVER_A, "pool-2", "device-1")]]


def test_newer_generation_replaces_the_older() -> None:
    got = devices_of(
        allocate(
            [claim("claim-0", req("req-0", CLASS_A))],
            CLASSES,
            [
                rslice("slice-old", NODE1, "pool-1", DRIVER_A, dev("device-old"), gen=1),
                rslice("slice-new", NODE1, "pool-1", DRIVER_A, dev("device-new"), gen=2),
            ],
        )
    )
    assert got == [[result("req-0", DRIVER_A, "pool-1", "device-new")]]


def test_pool_complete_across_nodes() -> None:
    # Two slices of one pool, one per node: node-1 sees one slice but the pool is complete.
    got = devices_of(
        allocate(
            [claim("claim-0", req("req-0", CLASS_A))],
            CLASSES,
            [
                one_device("slice-1", NODE1, "pool-1", DRIVER_A, count=2),
                rslice("slice-2", NODE2, "pool-1", DRIVER_A, dev("device-2"), count=2),
            ],
        )
    )
    assert got == [[result("req-0", DRIVER_A, "pool-1", "device-1")]]


def test_pools_sorted_by_driver_and_name() -> None:
    got = devices_of(
        allocate(
            [claim("claim-0", req("req-0", CLASS_A))],
            CLASSES,
            [
                one_device("slice-1", NODE1, "pool-b", DRIVER_A),
                one_device("slice-2", NODE1, "pool-a", DRIVER_A),
            ],
        )
    )
    assert got[0][0].pool == "pool-a"


# -- prioritized lists -----------------------------------------------------------------------


def test_prioritized_list_first_fails_second_succeeds() -> None:
    got = allocate(
        [
            claim(
                "claim-0",
                prio("req-0", sub("subReq-0", CLASS_A, 2), sub("subReq-1", CLASS_A, 1)),
                config=({"requests": ["req-0/subReq-1"], **_opaque(DRIVER_A, "x")},),
            )
        ],
        CLASSES,
        [one_device("slice-1", NODE1, "pool-1", DRIVER_A)],
    )
    assert not isinstance(got, AllocationFailure)
    assert [r.request for r in got[0].results] == ["req-0/subReq-1"]
    # The config names the chosen subrequest; it covers the claim's only request.
    assert got[0].config == ({**_opaque(DRIVER_A, "x"), "source": "FromClaim"},)


def test_prioritized_list_first_available() -> None:
    got = devices_of(
        allocate(
            [claim("claim-0", prio("req-0", sub("subReq-0", CLASS_B), sub("subReq-1", CLASS_A)))],
            CLASSES,
            [
                one_device("slice-1", NODE1, "pool-1", DRIVER_A),
                one_device("slice-2", NODE1, "pool-2", DRIVER_B),
            ],
        )
    )
    assert got == [[result("req-0/subReq-0", DRIVER_B, "pool-2", "device-1")]]


def test_prioritized_list_subrequest_over_the_size_limit_is_skipped() -> None:
    got = devices_of(
        allocate(
            [
                claim(
                    "claim-0", prio("req-0", sub("subReq-0", CLASS_A, 33), sub("subReq-1", CLASS_A))
                )
            ],
            CLASSES,
            [one_device("slice-1", NODE1, "pool-1", DRIVER_A)],
        )
    )
    assert [r.request for r in got[0]] == ["req-0/subReq-1"]


def test_prioritized_list_constraint_on_subrequest() -> None:
    numa = [0, 1, 1, 1]
    devices = [dev(f"device-{i}", attrs={"numa": int_attr(n)}) for i, n in enumerate(numa)]
    got = devices_of(
        allocate(
            [
                claim(
                    "claim-0",
                    prio("req-0", sub("subReq-0", CLASS_A, 2)),
                    req("req-1", CLASS_A),
                    constraints=(
                        DeviceConstraint(
                            requests=("req-0/subReq-0", "req-1"), match_attribute=_attr("numa")
                        ),
                    ),
                )
            ],
            CLASSES,
            [rslice("slice-1", NODE1, "pool-1", DRIVER_A, *devices)],
        )
    )
    assert [(r.request, r.device) for r in got[0]] == [
        ("req-0/subReq-0", "device-1"),
        ("req-0/subReq-0", "device-2"),
        ("req-1", "device-3"),
    ]


# -- taints ----------------------------------------------------------------------------------


def _tainted(effect: str, value: str = "v") -> ResourceSlice:
    return rslice(
        "slice-1",
        NODE1,
        "pool-1",
        DRIVER_A,
        dev("device-1", taints=(DeviceTaint("k", value, effect),)),
    )


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
def test_tainted_device_needs_toleration(effect: str) -> None:
    claims = [claim("claim-0", req("req-0", CLASS_A))]
    assert failure(allocate(claims, CLASSES, [_tainted(effect)])) == (
        AllocationFailure(CANNOT_ALLOCATE)
    )
    tolerating = [
        claim(
            "claim-0",
            req("req-0", CLASS_A, tolerations=(Toleration("k", "Exists", effect=effect),)),
        )
    ]
    got = devices_of(allocate(tolerating, CLASSES, [_tainted(effect)]))
    assert got[0][0].tolerations == (Toleration("k", "Exists", effect=effect),)


def test_toleration_value_must_match_for_equal() -> None:
    wrong = [claim("claim-0", req("req-0", CLASS_A, tolerations=(Toleration("k", "Equal", "w"),)))]
    right = [claim("claim-0", req("req-0", CLASS_A, tolerations=(Toleration("k", "Equal", "v"),)))]
    assert isinstance(allocate(wrong, CLASSES, [_tainted("NoExecute")]), AllocationFailure)
    assert not isinstance(allocate(right, CLASSES, [_tainted("NoExecute")]), AllocationFailure)


def test_none_effect_does_not_block() -> None:
    got = devices_of(
        allocate([claim("claim-0", req("req-0", CLASS_A))], CLASSES, [_tainted("None")])
    )
    assert got[0][0].device == "device-1"


def test_tainted_device_skipped_for_untainted() -> None:
    s = rslice(
        "slice-1",
        NODE1,
        "pool-1",
        DRIVER_A,
        dev("device-1", taints=(DeviceTaint("k", "v", "NoSchedule"),)),
        dev("device-2"),
    )
    got = devices_of(allocate([claim("claim-0", req("req-0", CLASS_A))], CLASSES, [s]))
    assert got[0][0].device == "device-2"


# -- partitionable devices (shared counters) -------------------------------------------------


def _partitioned(*, with_counters_slice_elsewhere: bool = False) -> list[ResourceSlice]:
    """A GPU with 80Gi of memory as a shared counter, offered whole or as two halves."""
    counters = (CounterSet("gpu-0", {"memory": 80 * GI}),)

    def takes(gib: int) -> tuple[CounterConsumption, ...]:
        return (CounterConsumption("gpu-0", {"memory": gib * GI}),)

    devices = (
        dev("gpu-0", consumes_counters=takes(80)),
        dev("gpu-0-half-0", consumes_counters=takes(40)),
        dev("gpu-0-half-1", consumes_counters=takes(40)),
    )
    if with_counters_slice_elsewhere:
        return [
            rslice(
                "a-counters",
                "",
                "pool-1",
                DRIVER_A,
                count=2,
                shared_counters=counters,
                all_nodes=True,
            ),
            rslice("b-devices", NODE1, "pool-1", DRIVER_A, *devices, count=2),
        ]
    return [rslice("slice-1", NODE1, "pool-1", DRIVER_A, *devices, shared_counters=counters)]


def test_partitionable_devices_two_halves_fit_not_whole_and_half() -> None:
    halves = [claim("claim-0", req("req-0", CLASS_A, 2, selectors=()))]
    got = devices_of(allocate(halves, CLASSES, _partitioned()))
    # The whole GPU is listed first and takes all 80Gi: the second device cannot fit, so the
    # search backtracks to the two halves.
    assert [r.device for r in got[0]] == ["gpu-0-half-0", "gpu-0-half-1"]


def test_partitionable_devices_counters_in_their_own_slice() -> None:
    got = devices_of(
        allocate(
            [claim("claim-0", req("req-0", CLASS_A, 2))],
            CLASSES,
            _partitioned(with_counters_slice_elsewhere=True),
        )
    )
    assert [r.device for r in got[0]] == ["gpu-0-half-0", "gpu-0-half-1"]


def test_partitionable_devices_in_use_consume_counters() -> None:
    slices = _partitioned()
    in_use = in_use_from_claims(
        [
            ResourceClaim(
                namespace="ns",
                name="other",
                uid="o",
                allocation=AllocationResult(
                    results=(result("r", DRIVER_A, "pool-1", "gpu-0-half-1"),)
                ),
            )
        ],
        slices,
    )
    assert in_use.consumed_counters == {(DRIVER_A, "pool-1", "gpu-0", "memory"): 40 * GI}
    got = devices_of(
        allocate([claim("claim-0", req("req-0", CLASS_A))], CLASSES, slices, in_use=in_use)
    )
    # The whole GPU no longer fits: half-0 is the one left.
    assert [r.device for r in got[0]] == ["gpu-0-half-0"]
    two = [claim("claim-0", req("req-0", CLASS_A, 2))]
    assert failure(allocate(two, CLASSES, slices, in_use=in_use)) == AllocationFailure(
        CANNOT_ALLOCATE
    )


def test_partitionable_devices_unknown_counter_set_is_invalid() -> None:
    s = rslice(
        "slice-1",
        NODE1,
        "pool-1",
        DRIVER_A,
        dev("gpu-0", consumes_counters=(CounterConsumption("nope", {"memory": GI}),)),
    )
    got = allocate([claim("claim-0", req("req-0", CLASS_A))], CLASSES, [s])
    assert failure(got) == AllocationFailure(INVALID_POOLS)


# -- consumable capacity ---------------------------------------------------------------------


def _shared_gpu(policy: CapacityPolicy | None, gib: int = 40) -> list[ResourceSlice]:
    return [
        rslice(
            "slice-1",
            NODE1,
            "pool-1",
            DRIVER_A,
            dev(
                "gpu-0",
                allow_multiple_allocations=True,
                caps={"memory": Capacity(gib * GI, policy)},
            ),
        )
    ]


_RANGE = CapacityPolicy(
    default=GI, valid_range_min=GI, valid_range_step=GI, valid_range_max=40 * GI
)


def _share(name: str, gib: Decimal | None) -> ResourceClaim:
    caps = {} if gib is None else {"memory": gib * GI}
    return claim(name, req("req-0", CLASS_A, capacity_requests=caps))


def test_consumable_capacity_share_results() -> None:
    got = devices_of(allocate([_share("claim-0", Decimal(10))], CLASSES, _shared_gpu(_RANGE)))
    assert got == [
        [
            result(
                "req-0",
                DRIVER_A,
                "pool-1",
                "gpu-0",
                share_id="share-0",
                consumed_capacity={f"{DRIVER_A}/memory": 10 * GI},
            )
        ]
    ]


def test_consumable_capacity_many_claims_until_full() -> None:
    slices = _shared_gpu(_RANGE)
    four = [_share(f"claim-{i}", Decimal(10)) for i in range(4)]
    got = devices_of(allocate(four, CLASSES, slices))
    assert [r[0].share_id for r in got] == ["share-0", "share-1", "share-2", "share-3"]
    five = [_share(f"claim-{i}", Decimal(10)) for i in range(5)]
    assert failure(allocate(five, CLASSES, slices)) == AllocationFailure(CANNOT_ALLOCATE)


def test_consumable_capacity_in_use_counts() -> None:
    slices = _shared_gpu(_RANGE)
    held = ResourceClaim(
        namespace="ns",
        name="held",
        uid="h",
        allocation=AllocationResult(
            results=(
                result(
                    "r",
                    DRIVER_A,
                    "pool-1",
                    "gpu-0",
                    share_id="abc",
                    consumed_capacity={f"{DRIVER_A}/memory": 35 * GI},
                ),
            )
        ),
    )
    in_use = in_use_from_claims([held], slices)
    assert in_use.devices == frozenset()
    assert in_use.share_ids == frozenset({(DRIVER_A, "pool-1", "gpu-0", "abc")})
    assert not isinstance(
        allocate([_share("c", Decimal(5))], CLASSES, slices, in_use=in_use), AllocationFailure
    )
    assert isinstance(
        allocate([_share("c", Decimal(6))], CLASSES, slices, in_use=in_use), AllocationFailure
    )


@pytest.mark.parametrize(
    ("policy", "requested", "consumed"),
    [
        (_RANGE, Decimal("1.5"), Decimal(2)),  # rounded up to the next step
        (_RANGE, Decimal("0.5"), Decimal(1)),  # raised to the minimum
        (_RANGE, None, Decimal(1)),  # the default
        (None, None, Decimal(40)),  # no policy, no request: the whole capacity
        (None, Decimal(7), Decimal(7)),
        (CapacityPolicy(default=8 * GI, valid_values=(8 * GI, 16 * GI)), Decimal(9), Decimal(16)),
    ],
)
def test_consumable_capacity_request_policy(
    policy: CapacityPolicy | None, requested: Decimal | None, consumed: Decimal
) -> None:
    device = _shared_gpu(policy)[0].devices[0]
    caps = {} if requested is None else {"memory": requested * GI}
    assert consumed_capacity(caps, DRIVER_A, device) == {f"{DRIVER_A}/memory": consumed * GI}
    got = devices_of(allocate([_share("c", requested)], CLASSES, _shared_gpu(policy)))
    assert got[0][0].consumed_capacity == {f"{DRIVER_A}/memory": consumed * GI}


def test_consumable_capacity_over_the_maximum_does_not_fit() -> None:
    assert isinstance(
        allocate([_share("c", Decimal(41))], CLASSES, _shared_gpu(_RANGE, gib=80)),
        AllocationFailure,
    )


def test_capacity_request_on_device_without_that_capacity_skips_it() -> None:
    s = rslice("slice-1", NODE1, "pool-1", DRIVER_A, dev("device-1"), dev("device-2", caps=mem(8)))
    got = devices_of(
        allocate(
            [claim("claim-0", req("req-0", CLASS_A, capacity_requests={"memory": 4 * GI}))],
            CLASSES,
            [s],
        )
    )
    # device-2 is a single-allocation device: the request is a minimum, nothing is recorded.
    assert got == [[result("req-0", DRIVER_A, "pool-1", "device-2")]]


# -- in-use state ----------------------------------------------------------------------------


def test_in_use_from_claims_skips_admin_access_and_unallocated() -> None:
    claims = [
        ResourceClaim(
            namespace="ns",
            name="a",
            uid="a",
            allocation=AllocationResult(
                results=(
                    result("r", DRIVER_A, "pool-1", "device-1"),
                    result("r", DRIVER_A, "pool-1", "device-2", admin_access=True),
                )
            ),
        ),
        ResourceClaim(namespace="ns", name="b", uid="b"),
    ]
    assert in_use_from_claims(claims, []).devices == frozenset({(DRIVER_A, "pool-1", "device-1")})


# -- the caller's preference -----------------------------------------------------------------


def test_prefer_reorders_candidates() -> None:
    devices = [dev(f"gpu-{i}") for i in range(8)]
    slices = [rslice("slice-1", NODE1, "pool-1", DRIVER_A, *devices)]
    claims = [claim("claim-0", req("req-0", CLASS_A, 2))]
    assert [r.device for r in devices_of(allocate(claims, CLASSES, slices))[0]] == [
        "gpu-0",
        "gpu-1",
    ]
    chosen = {"gpu-5": 0, "gpu-3": 1}
    got = devices_of(
        allocate(claims, CLASSES, slices, prefer=lambda _id, d: chosen.get(d.name, 99))
    )
    assert [r.device for r in got[0]] == ["gpu-5", "gpu-3"]


# -- a search that must stay bounded ---------------------------------------------------------


def _adversarial(n: int) -> tuple[list[ResourceClaim], list[ResourceSlice]]:
    # n devices with n/2 - 1 distinct numa values; a request for n/2 devices with distinct
    # numa values cannot succeed, and only finds out after trying subsets of devices.
    devices = [dev(f"gpu-{i:02}", attrs={"numa": int_attr(i % (n // 2 - 1))}) for i in range(n)]
    claims = [
        claim(
            "claim-0",
            req("req-0", CLASS_A, n // 2),
            constraints=(DeviceConstraint(distinct_attribute=_attr("numa")),),
        )
    ]
    return claims, [rslice("slice-1", NODE1, "pool-1", DRIVER_A, *devices)]


def test_adversarial_search_hits_the_step_limit() -> None:
    claims, slices = _adversarial(32)
    t0 = time.monotonic()
    got = allocate(claims, CLASSES, slices, max_steps=20_000)
    assert failure(got) == AllocationFailure(TIMED_OUT)
    assert time.monotonic() - t0 < 5


def test_adversarial_search_hits_the_timeout() -> None:
    claims, slices = _adversarial(32)
    t0 = time.monotonic()
    got = allocate(claims, CLASSES, slices, timeout=0.05)
    assert failure(got) == AllocationFailure(TIMED_OUT)
    assert time.monotonic() - t0 < 2


def test_small_adversarial_search_finishes() -> None:
    # Small enough to exhaust: the answer is "cannot", found without the limit.
    claims, slices = _adversarial(8)
    assert failure(allocate(claims, CLASSES, slices)) == AllocationFailure(CANNOT_ALLOCATE)


def test_selector_results_are_cached_across_nodes() -> None:
    s = rslice(
        "slice-1", "", "pool-1", DRIVER_A, *(dev(f"gpu-{i}") for i in range(8)), all_nodes=True
    )
    selectors = FakeSelectors()
    allocator = Allocator({c.name: c for c in CLASSES}, SliceIndex([s]), InUse(), selectors)
    claims = [claim("claim-0", req("req-0", CLASS_A, 8))]
    assert not isinstance(allocator.allocate(node(NODE1), claims), AllocationFailure)
    first = selectors.evaluations
    assert not isinstance(allocator.allocate(node(NODE2), claims), AllocationFailure)
    assert first == 8
    assert selectors.evaluations == first


def test_all_devices_leaves_out_a_shared_device_without_capacity() -> None:
    s = rslice(
        "slice-1",
        NODE1,
        "pool-1",
        DRIVER_A,
        dev("device-1"),
        dev("gpu-0", allow_multiple_allocations=True, caps={"memory": Capacity(4 * GI)}),
    )
    got = devices_of(
        allocate(
            [claim("claim-0", req("req-0", CLASS_A, 0, mode=AllocationMode.ALL))],
            CLASSES,
            [s],
            in_use=InUse(
                consumed_capacity={(DRIVER_A, "pool-1", "gpu-0"): {f"{DRIVER_A}/memory": GI}}
            ),
        )
    )
    # A share of gpu-0 would take its whole 4Gi (no request, no policy): 1Gi is used.
    assert [r.device for r in got[0]] == ["device-1"]


def test_node_label_churn_keeps_one_entry_per_node() -> None:
    index = SliceIndex([one_device("slice-1", NODE1, "pool-1", DRIVER_A)])
    allocator = Allocator({c.name: c for c in CLASSES}, index, InUse(), FakeSelectors())
    claims = [claim("claim-0", req("req-0", CLASS_A))]
    for i in range(50):
        got = allocator.allocate(Node(NODE1, {"gfd.timestamp": str(i)}), claims)
        assert not isinstance(got, AllocationFailure)
    assert len(index._nodes) == 1


def test_claim_errors_are_remembered_per_claim() -> None:
    selectors = FakeSelectors()
    allocator = Allocator({}, SliceIndex([]), InUse(), selectors)
    bad = [claim("claim-0", req("req-0", CLASS_A))]
    first = allocator.allocate(node(NODE1), bad)
    second = allocator.allocate(node(NODE2), bad)
    assert first == second
    assert failure(first).kind is FailureKind.ERROR

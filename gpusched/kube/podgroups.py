"""The daemon's GangPort (framework/gangs.py): watches of both PodGroup APIs.

* `pod_group_from_k8s` turns one object into a PodGroupSpec; a malformed object gives a
  spec whose `problem` says what is wrong (its pods stay unschedulable with that message),
  never an exception out of the reflector.
* `KubePodGroups` keeps the last seen spec of every PodGroup of
  `scheduling.x-k8s.io/v1alpha1` (scheduler-plugins' CRD) and `scheduling.k8s.io/v1alpha2`
  (upstream, alpha) and calls `on_change(api, key, deleted)` on every add, update and
  delete (the daemon routes it to ClusterEvents.pod_group_changed).
* Either API may be missing (the CRD not installed, the alpha API off): its list answers
  404, its reflector stops with one log line (kube/watch.py `optional`), /healthz does
  not count it, and the port knows no object of that API until a restart.

RBAC: get/list/watch `podgroups` in both groups (manifests/rbac/gpusched.yaml).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from gpusched.framework.gangs import (
    DISRUPTION_POD,
    DISRUPTION_POD_GROUP,
    TIER_RACK,
    TIER_SPINE,
    PodGroupSpec,
)
from gpusched.kube.client import JSON, Kube
from gpusched.kube.watch import Backoff, EventType, Reflector
from gpusched.model import keys
from gpusched.model.pod import GangAPI, parse_time

COSCHEDULING_GROUP = "scheduling.x-k8s.io"
COSCHEDULING_VERSION = "v1alpha1"
WORKLOAD_GROUP = "scheduling.k8s.io"
WORKLOAD_VERSION = "v1alpha2"
PATHS = {
    GangAPI.COSCHEDULING: f"/apis/{COSCHEDULING_GROUP}/{COSCHEDULING_VERSION}/podgroups",
    GangAPI.WORKLOAD: f"/apis/{WORKLOAD_GROUP}/{WORKLOAD_VERSION}/podgroups",
}
# The clique tier is GFD's label key: a gang in one NVLink fabric domain (TierDomains reads
# any label key).
TIERS = (TIER_RACK, TIER_SPINE, keys.GFD_CLIQUE)

OnChange = Callable[[GangAPI, str, bool], None]


def pod_group_path(api: GangAPI, namespace: str, name: str) -> str:
    group, version = (
        (COSCHEDULING_GROUP, COSCHEDULING_VERSION)
        if api is GangAPI.COSCHEDULING
        else (WORKLOAD_GROUP, WORKLOAD_VERSION)
    )
    return f"/apis/{group}/{version}/namespaces/{namespace}/podgroups/{name}"


def _int(value: Any) -> int | None:
    """A JSON integer (a bool is not one)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _tier(ann: Mapping[str, Any], key: str, problems: list[str]) -> str:
    raw = ann.get(key)
    if raw is None:
        return ""
    value = str(raw).strip()
    if value not in TIERS:
        problems.append(f"annotation {key}={raw!r}: must be {' or '.join(TIERS)}")
        return ""
    return value


def pod_group_from_k8s(obj: Mapping[str, Any], api: GangAPI) -> PodGroupSpec:
    """One PodGroup object of `api` as the scheduler uses it. Never raises on a
    malformed object: the spec's `problem` names every fault found."""
    meta = _dict(obj.get("metadata"))
    key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    ann = _dict(meta.get("annotations"))
    problems: list[str] = []
    required = _tier(ann, keys.TOPOLOGY_REQUIRED, problems)
    preferred = _tier(ann, keys.TOPOLOGY_PREFERRED, problems)
    raw_spec = obj.get("spec")
    if raw_spec is not None and not isinstance(raw_spec, dict):
        problems.append("spec is not an object")
    spec = _dict(raw_spec)
    min_member = 1
    gang = True
    timeout: float | None = None
    disruption = ""
    if api is GangAPI.COSCHEDULING:
        raw = spec.get("minMember", 0)
        value = _int(raw)
        if value is None or value < 0:
            problems.append(f"spec.minMember={raw!r}: must be an integer >= 1")
        else:
            # Unset (0, omitempty) gates nothing in scheduler-plugins' Coscheduling: its
            # PreFilter never finds fewer than 0 siblings and Permit allows the first
            # pod at once, so each pod goes on its own, as with minMember 1.
            min_member = max(value, 1)
        raw_timeout = spec.get("scheduleTimeoutSeconds")
        if raw_timeout is not None:
            seconds = _int(raw_timeout)
            if seconds is None or seconds < 0:
                problems.append(
                    f"spec.scheduleTimeoutSeconds={raw_timeout!r}: must be an integer >= 0"
                )
            elif seconds > 0:
                # 0, like unset, is the plugin's default (Coscheduling's GetWaitTimeDuration).
                timeout = float(seconds)
    elif api is GangAPI.WORKLOAD:
        policy = _dict(spec.get("schedulingPolicy"))
        has_gang, has_basic = policy.get("gang") is not None, policy.get("basic") is not None
        if has_gang and has_basic:
            problems.append("spec.schedulingPolicy sets both basic and gang: set one")
        elif has_gang:
            raw = _dict(policy.get("gang")).get("minCount")
            value = _int(raw)
            if value is None or value < 1:
                problems.append(f"spec.schedulingPolicy.gang.minCount={raw!r}: must be >= 1")
            else:
                min_member = value
        elif has_basic:
            gang = False
        else:
            problems.append("spec.schedulingPolicy sets neither basic nor gang")
        raw_topology = _dict(spec.get("schedulingConstraints")).get("topology")
        topology = raw_topology if isinstance(raw_topology, list) else []
        if raw_topology is not None and not isinstance(raw_topology, list):
            problems.append("spec.schedulingConstraints.topology is not a list")
        if len(topology) > 1:
            problems.append(
                f"spec.schedulingConstraints.topology has {len(topology)} entries:"
                " one level is supported"
            )
        elif topology:
            label = _dict(topology[0]).get("key")
            if not isinstance(label, str) or not label.strip():
                problems.append("spec.schedulingConstraints.topology[0].key must be a label key")
            elif required:
                problems.append(
                    f"spec.schedulingConstraints.topology[0].key={label!r} and annotation"
                    f" {keys.TOPOLOGY_REQUIRED}={required!r} both require a topology: use one"
                )
            else:
                required = label.strip()
        raw_mode = spec.get("disruptionMode")
        if raw_mode is not None:
            if raw_mode in (DISRUPTION_POD, DISRUPTION_POD_GROUP):
                disruption = str(raw_mode)
            else:
                problems.append(
                    f"spec.disruptionMode={raw_mode!r}: must be {DISRUPTION_POD} or"
                    f" {DISRUPTION_POD_GROUP}"
                )
    else:
        problems.append(f"{api.value} has no PodGroup object")
    return PodGroupSpec(
        key=key,
        api=api,
        min_member=min_member,
        gang=gang,
        timeout_seconds=timeout,
        topology_required=required,
        topology_preferred=preferred,
        created=parse_time(meta.get("creationTimestamp")),
        uid=str(meta.get("uid") or ""),
        problem="; ".join(problems),
        disruption_mode=disruption,
    )


async def _forever(reflector: Reflector[Any]) -> None:
    """Run a reflector; if its API is not served it returns, and this waits until
    cancelled, so the daemon never takes a missing optional API for a dead watch."""
    await reflector.run()
    await asyncio.get_running_loop().create_future()


class KubePodGroups:
    def __init__(
        self,
        kube: Kube,
        *,
        on_change: OnChange = lambda _api, _key, _deleted: None,
        backoff: Callable[[], Backoff] = Backoff,
        watch_timeout: int = 60,
        read_timeout: float = 90.0,
    ) -> None:
        self.on_change = on_change
        self.groups: dict[tuple[GangAPI, str], PodGroupSpec] = {}
        self.watches: dict[GangAPI, Reflector[PodGroupSpec]] = {}
        for api, path in PATHS.items():

            def decode(raw: JSON, api: GangAPI = api) -> PodGroupSpec:
                return pod_group_from_k8s(raw, api)

            self.watches[api] = Reflector(
                kube,
                path,
                decode,
                self._on_event,
                name=f"podgroups.{path.split('/')[2]}",
                watch_timeout=watch_timeout,
                read_timeout=read_timeout,
                backoff=backoff(),
                optional=True,
            )

    @property
    def reflectors(self) -> tuple[Reflector[PodGroupSpec], ...]:
        return tuple(self.watches.values())

    async def wait_synced(self) -> None:
        await asyncio.gather(*(r.synced.wait() for r in self.reflectors))

    async def run(self) -> None:
        """Both watches until cancelled (an unserved API's watch idles)."""
        await asyncio.gather(*(_forever(r) for r in self.reflectors))

    def _on_event(self, kind: EventType, group: PodGroupSpec) -> None:
        index = (group.api, group.key)
        deleted = kind is EventType.DELETED
        if deleted:
            old = self.groups.get(index)
            if old is None or (old.uid and group.uid and old.uid != group.uid):
                return  # a stale deletion of an object already replaced
            del self.groups[index]
        else:
            self.groups[index] = group
        self.on_change(group.api, group.key, deleted)

    def pod_group(self, api: GangAPI, key: str) -> PodGroupSpec | None:
        return self.groups.get((api, key))

"""The smallest change that would let a pending pod fit, one search per constraint kind.

Every change is found and verified the same way: change the input (the Facts: pods gone,
a plugin's args, the pod's spec, a tenant's quota, a gang member added), build a fresh copy
of the scheduler's state from it and run the pod's profile again (Explainer.fits). Nothing
here knows a scheduling rule: a change is reported only if the plugins themselves then let
the pod through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gpusched.explain import attempt as dry
from gpusched.explain.kinds import (
    AFFINITY,
    FRAGMENTATION,
    GANG,
    QUOTA,
    RESOURCES,
    THERMAL,
    TOPOLOGY,
)
from gpusched.explain.world import Facts, QuotaOverride
from gpusched.model import keys, quota
from gpusched.model.pod import NVLink, PodInfo
from gpusched.plugins.thermal.args import ThermalArgs

if TYPE_CHECKING:
    from gpusched.explain.engine import Explainer

THERMAL_PLUGIN = "Thermal"
# Red lines tried up to (the plugin's args refuse 150 °C and above).
MAX_RED_LINE = 149
# Gang members the gang search adds at most.
MAX_NEW_MEMBERS = 64
# Nodes whose pods a gang's room search considers (those where one member comes closest).
MAX_GANG_NODES = 8


@dataclass(frozen=True, slots=True)
class Change:
    """One verified counterfactual: `text` for people, `action` for tools (and tests)."""

    kind: str
    text: str
    action: dict[str, Any]


def search(ex: Explainer, now: dry.Attempt, binding: str, closest: Sequence[str]) -> list[Change]:
    """The verified changes for the binding constraint `binding` (kinds joined by "+" are
    tried one by one: a change that relaxes only one of them is kept only if that suffices)."""
    out: list[Change] = []
    pod = now.pod
    kinds = binding.split("+")
    if GANG in kinds and now.stage == dry.PRE_ENQUEUE:
        out += gang_members(ex, pod)
    elif GANG in kinds:
        change = gang_room(ex, pod)
        if change is not None:
            out.append(change)
    if QUOTA in kinds:
        out += quota_room(ex, pod)
    if THERMAL in kinds:
        out += red_line(ex, pod)
    if TOPOLOGY in kinds:
        out += nvlink_preferred(ex, pod)
    if AFFINITY in kinds:
        own = affinity(ex, pod)
        out += own
        if not own:
            # Not the pod's own terms: a placed pod's anti-affinity (or the pod's affinity
            # to pods elsewhere) may hold it; the pods with affinity terms on the closest
            # nodes, as victims.
            change = victims_on_nodes(ex, pod, closest, AFFINITY, _has_pod_affinity)
            if change is not None:
                out.append(change)
    if RESOURCES in kinds or FRAGMENTATION in kinds or "nominated" in kinds:
        change = victims_on_nodes(
            ex, pod, closest, FRAGMENTATION if FRAGMENTATION in kinds else RESOURCES
        )
        if change is not None:
            out.append(change)
    return out


# -- wording --------------------------------------------------------------------------------


def gpus(pod: PodInfo) -> str:
    req = pod.request
    if req.gpu_cards:
        return f"{req.gpu_cards} GPU{'s' if req.gpu_cards != 1 else ''}"
    if req.gpu_milli:
        return f"{req.gpu_milli / 1000:g} GPU"
    return "no GPU"


def describe(pod: PodInfo) -> str:
    return f"{pod.key} ({gpus(pod)}, priority {pod.priority})"


def _change(kind: str, text: str, action: dict[str, Any]) -> Change:
    return Change(kind, text, action)


# -- resources and fragmentation: pods that would have to leave ----------------------------


Probe = Callable[[Sequence[PodInfo]], bool]


def fewest_victims(
    ex: Explainer,
    pool: Sequence[PodInfo],
    fits: Callable[[Facts], dry.Attempt | None],
    probe: Probe | None = None,
) -> tuple[list[PodInfo], dry.Attempt] | None:
    """The fewest, lowest-priority pods of `pool` whose removal makes `fits` hold: one pod
    if one suffices (the lowest priority, then the smallest); else taken lowest priority
    (then biggest) first until it holds, then each given back, highest priority first,
    while it still holds (kube-scheduler's reprieve). `probe(victims)`: a cheaper test of
    the same question (the pods removed from the explainer's copy in place); the set it
    finds is then verified with `fits` on a copy built afresh."""
    test: Probe = probe or (
        lambda victims: fits(ex.facts.without(p.uid for p in victims)) is not None
    )
    chosen: list[PodInfo] | None = None
    for victim in sorted(pool, key=lambda p: (p.priority, p.request.gpu_milli_total)):
        if ex.spent():
            return None
        if test([victim]):
            chosen = [victim]
            break
    if chosen is None:
        order = sorted(
            pool, key=lambda p: (p.priority, -p.request.gpu_milli_total, -p.request.cpu_milli)
        )
        taken: list[PodInfo] = []
        for victim in order:
            if ex.spent():
                return None
            taken.append(victim)
            if test(taken):
                chosen = taken
                break
        if chosen is None:
            return None
        for victim in sorted(chosen, key=lambda p: (-p.priority, p.request.gpu_milli_total)):
            if len(chosen) == 1 or ex.spent():
                break
            trial = [p for p in chosen if p.uid != victim.uid]
            if test(trial):
                chosen = trial
    found = fits(ex.facts.without(p.uid for p in chosen))
    if found is None:
        return None
    return sorted(chosen, key=lambda p: (p.priority, p.key)), found


def _probe(ex: Explainer, pod: PodInfo, node: str = "") -> Probe:
    """Whether the pod fits (on `node`) with the victims removed from the explainer's own
    copy for the trial (World.without)."""

    def probe(victims: Sequence[PodInfo]) -> bool:
        ex.trials += 1
        with ex.world.without(victims):
            a = dry.run(ex.world, pod, blockers=False)
        return a.fits and (not node or node in a.feasible)

    return probe


def victims_on_nodes(
    ex: Explainer,
    pod: PodInfo,
    nodes: Iterable[str],
    kind: str,
    eligible: Callable[[PodInfo], bool] | None = None,
) -> Change | None:
    """ "fits on node X if pod Y (2 GPUs, priority 0) left": the node among `nodes` needing
    the fewest, then lowest-priority, victims (among the pods `eligible` accepts)."""
    best: tuple[tuple[int, int, int], str, list[PodInfo]] | None = None
    world = ex.world
    for node in list(nodes)[:5]:
        pool = [
            p
            for p in world.cache.pods_on_node(node)
            if p.uid != pod.uid and (eligible is None or eligible(p))
        ]
        if not pool:
            continue
        got = fewest_victims(ex, pool, _fits_on(ex, pod, node), _probe(ex, pod, node))
        if got is None:
            continue
        victims, _ = got
        rank = (
            len(victims),
            max(p.priority for p in victims),
            sum(p.request.gpu_milli_total for p in victims),
        )
        if best is None or rank < best[0]:
            best = (rank, node, victims)
    if best is None:
        return None
    _, node, victims = best
    names = ", ".join(f"pod {describe(p)}" for p in victims)
    return _change(
        kind,
        f"fits on node {node} if {names} left",
        {"node": node, "delete": [p.key for p in victims]},
    )


def _has_pod_affinity(pod: PodInfo) -> bool:
    aff = pod.affinity or {}
    return bool(aff.get("podAffinity") or aff.get("podAntiAffinity"))


def _fits_on(ex: Explainer, pod: PodInfo, node: str) -> Callable[[Facts], dry.Attempt | None]:
    return lambda facts: ex.fits(facts, pod, node)


# -- thermal: the red line -----------------------------------------------------------------


def red_line(ex: Explainer, pod: PodInfo) -> list[Change]:
    """The lowest whole-degree red line (Thermal's redLineCelsius) that admits a node."""
    profile = ex.facts.profiles[pod.scheduler_name]
    if THERMAL_PLUGIN not in profile.names():
        return []
    args = profile.plugin_args.get(THERMAL_PLUGIN) or ThermalArgs()
    assert isinstance(args, ThermalArgs)
    current = args.red_line_celsius

    def at(red: float) -> dry.Attempt | None:
        new = replace(args, red_line_celsius=red, cool_celsius=min(args.cool_celsius, red - 1))
        if new.validate():
            return None
        prof = replace(profile, plugin_args={**profile.plugin_args, THERMAL_PLUGIN: new})
        facts = replace(ex.facts, profiles={**ex.facts.profiles, pod.scheduler_name: prof})
        return ex.fits(facts, pod)

    lo, hi = int(current), MAX_RED_LINE  # lo: known not to admit (the current line)
    top = at(hi)
    if top is None:
        return []
    found = top
    while hi - lo > 1:  # more nodes pass as the line rises: bisect on the real plugin
        mid = (lo + hi) // 2
        got = at(mid)
        if got is None:
            lo = mid
        else:
            hi, found = mid, got
    return [
        _change(
            THERMAL,
            f"fits if the red line were {hi} °C (Thermal redLineCelsius, now {current:g} °C):"
            f" node {found.feasible[0]} would take it",
            {"redLineCelsius": hi, "node": found.feasible[0]},
        )
    ]


# -- topology: NVLink ----------------------------------------------------------------------


def nvlink_preferred(ex: Explainer, pod: PodInfo) -> list[Change]:
    if pod.request.nvlink != NVLink.REQUIRED:
        return []
    relaxed = replace(
        pod,
        annotations={**pod.annotations, keys.NVLINK: "preferred"},
        request=replace(pod.request, nvlink=NVLink.PREFERRED),
    )
    got = ex.fits(ex.facts.with_pods([relaxed]), relaxed)
    if got is None:
        return []
    return [
        _change(
            TOPOLOGY,
            f"fits with {keys.NVLINK}: preferred (node {got.feasible[0]})",
            {"annotations": {keys.NVLINK: "preferred"}, "node": got.feasible[0]},
        )
    ]


# -- affinity ------------------------------------------------------------------------------


def affinity(ex: Explainer, pod: PodInfo) -> list[Change]:
    """The pod without one of its placement terms: its nodeSelector, its required node
    affinity, or one required pod (anti-)affinity term."""
    trials: list[tuple[str, PodInfo, dict[str, Any]]] = []
    if pod.node_selector:
        for key in sorted(pod.node_selector):
            sel = {k: v for k, v in pod.node_selector.items() if k != key}
            trials.append(
                (
                    f"fits without the nodeSelector term {key}={pod.node_selector[key]}",
                    replace(pod, node_selector=sel),
                    {"remove": f"nodeSelector.{key}"},
                )
            )
    aff = dict(pod.affinity or {})
    node_aff = dict(aff.get("nodeAffinity") or {})
    req = "requiredDuringSchedulingIgnoredDuringExecution"
    if node_aff.get(req):
        rest = {**aff, "nodeAffinity": {k: v for k, v in node_aff.items() if k != req}}
        trials.append(
            (
                f"fits without the required node affinity {node_aff[req]}",
                replace(pod, affinity=rest),
                {"remove": f"affinity.nodeAffinity.{req}"},
            )
        )
    for kind in ("podAffinity", "podAntiAffinity"):
        terms = list((aff.get(kind) or {}).get(req) or ())
        for i, term in enumerate(terms):
            kept = terms[:i] + terms[i + 1 :]
            block = {**(aff.get(kind) or {}), req: kept}
            trials.append(
                (
                    f"fits without the {kind} term {term}",
                    replace(pod, affinity={**aff, kind: block}),
                    {"remove": f"affinity.{kind}.{req}[{i}]"},
                )
            )
    out = []
    for text, relaxed, action in trials:
        got = ex.fits(ex.facts.with_pods([relaxed]), relaxed)
        if got is not None:
            out.append(
                _change(
                    AFFINITY,
                    f"{text} (node {got.feasible[0]})",
                    {**action, "node": got.feasible[0]},
                )
            )
    return out


# -- quota ---------------------------------------------------------------------------------


def quota_room(ex: Explainer, pod: PodInfo) -> list[Change]:
    """ "fits if quota X of namespace N allowed 4 more GPUs", and "if pod Y of the same
    tenant left"."""
    tenancy = ex.facts.tenancy
    tenant = tenancy.tenant_of(pod.namespace)
    q = tenancy.quota(tenant)
    if q is None or q.problem:
        return []
    used = ex.world.handle.tenant_usage(tenant)
    own = quota.usage_of(pod.request)
    out: list[Change] = []
    # The pod alone, then as many of its size as a gang's pending members charge together.
    for times in (1, 2, 4, 8, 16, 32, 64):
        charge = tuple(x * times for x in own)
        after = quota.add(used, charge)
        limits = tuple(
            (a if lim is not None and a > lim else lim) for a, lim in zip(after, q.max, strict=True)
        )
        if limits == q.max:
            continue
        facts = replace(ex.facts, tenancy=QuotaOverride(tenancy, tenant, limits))
        got = ex.fits(facts, pod)
        if got is None:
            continue
        more = []
        raised: dict[str, str] = {}
        for i, (new, old) in enumerate(zip(limits, q.max, strict=True)):
            if new != old and old is not None and new is not None:
                name = quota.RESOURCES[i]
                more.append(_amount(name, new - old))
                raised[name] = _quantity(name, new)
        out.append(
            _change(
                QUOTA,
                f"fits if ElasticQuota {q.key} (tenant {tenant}) allowed {', '.join(more)} more"
                f" (max {', '.join(f'{k}: {v}' for k, v in raised.items())})",
                {"quota": q.key, "max": raised},
            )
        )
        break
    # Or room made inside the quota: the tenant's own placed pods.
    pool = [
        e.pod
        for e in ex.world.cache.allocations()
        if tenancy.tenant_of(e.pod.namespace) == tenant and e.pod.uid != pod.uid
    ]
    got_v = (
        fewest_victims(ex, pool, lambda facts: ex.fits(facts, pod), _probe(ex, pod))
        if pool
        else None
    )
    if got_v is not None:
        victims, _ = got_v
        out.append(
            _change(
                QUOTA,
                f"fits if {', '.join(f'pod {describe(p)}' for p in victims)}"
                " of the same tenant left",
                {"delete": [p.key for p in victims]},
            )
        )
    return out


def _amount(name: str, value: int) -> str:
    if name == quota.GPU:
        return f"{value / 1000:g} GPU{'s' if value != 1000 else ''}"
    if name == quota.CPU:
        return f"{value / 1000:g} CPU"
    if name == quota.GPU_MEMORY:
        return f"{value} MiB of GPU memory"
    if name == quota.MEMORY:
        return f"{value} bytes of memory"
    return f"{value} {name}"


def _quantity(name: str, value: int) -> str:
    """A limit in the ElasticQuota's own units (what `spec.max` takes)."""
    if name in (quota.GPU, quota.CPU):
        return f"{value}m" if value % 1000 else str(value // 1000)
    if name == quota.GPU_MEMORY:
        return f"{value}Mi"
    return str(value)


# -- gang ------------------------------------------------------------------------------------


def gang_members(ex: Explainer, pod: PodInfo) -> list[Change]:
    """A gang held at PreEnqueue for want of members: how many more must be created, and
    whether the gang then fits (members made as copies of this pod)."""
    if pod.gang is None:
        return []
    key = pod.gang.name
    have = len(ex.world.handle.gang_members(key))
    for extra in range(1, MAX_NEW_MEMBERS + 1):
        clones = [
            replace(pod, uid=f"{pod.uid}-explain-{i}", name=f"{pod.name}-explain-{i}")
            for i in range(extra)
        ]
        facts = ex.facts.with_pods(clones)
        a = ex.attempt(facts, pod)
        if a is None:
            return []
        if a.stage == dry.PRE_ENQUEUE:
            continue
        words = (
            f"gang {key} has {have} of its minimum {have + extra} pods: needs {extra} more created"
        )
        if a.fits:
            return [
                _change(
                    GANG,
                    f"{words}; then it fits (node {a.feasible[0]})",
                    {"gang": key, "create": extra},
                )
            ]
        return [
            _change(
                GANG,
                f"{words}; then it is still held: {a.message()}",
                {"gang": key, "create": extra, "fits": False},
            )
        ]
    return []


def gang_room(ex: Explainer, pod: PodInfo) -> Change | None:
    """A complete gang that does not fit as a whole: the fewest, lowest-priority placed
    pods (not the gang's own) on the nodes where one member alone comes closest, whose
    leaving lets the gang through."""
    if pod.gang is None:
        return None
    key = pod.gang.name
    alone = dry.run(ex.world, replace(pod, gang=None))
    if alone.fits:
        nodes = alone.feasible
    else:
        fewest = min((len(b) for b in alone.blockers.values()), default=0)
        nodes = [n for n, b in alone.blockers.items() if len(b) == fewest]
    members = {p.uid for p, _ in ex.world.handle.gang_members(key)}
    pool = [
        p
        for n in nodes[:MAX_GANG_NODES]
        for p in ex.world.cache.pods_on_node(n)
        if p.uid not in members
    ]
    if not pool:
        return None
    got = fewest_victims(ex, pool, lambda facts: ex.fits(facts, pod), _probe(ex, pod))
    if got is None:
        return None
    victims, _ = got
    return _change(
        GANG,
        f"gang {key} fits if {', '.join(f'pod {describe(p)}' for p in victims)} left",
        {"gang": key, "delete": [p.key for p in victims]},
    )

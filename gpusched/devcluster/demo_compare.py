"""`make demo`'s side-by-side: what the same workload got from gpusched and from
kube-scheduler, measured from the pods the API server holds, a verdict and a legend.

Pure functions over pod and node JSON (no API calls), so the unit tests check every number.

Cards a pod holds: under gpusched the cards named in `gpusched.io/gpu-ids` (a card shared
by several pods is held once); under kube-scheduler, as with the NVIDIA device plugin, one
whole card per `nvidia.com/gpu` asked (it cannot share). What the pods really need comes
from the label `demo.gpusched.io/gpu-milli` (demo_workload.NEED_LABEL), the same in both
variants. Finished pods (Succeeded, Failed) and pods being deleted hold nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rich.table import Table

from gpusched.devcluster.demo_workload import GROUP_LABEL, NEED_LABEL, PARTS, Part
from gpusched.kube import JSON
from gpusched.model import keys

HIGHER = "higher"
LOWER = "lower"


def live(pod: JSON) -> bool:
    """Bound and not finished or being deleted: it holds what it was given."""
    if not (pod.get("spec") or {}).get("nodeName"):
        return False
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _whole_cards(pod: JSON) -> int:
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or ():
        limits = (c.get("resources") or {}).get("limits") or {}
        total += int(limits.get(keys.GPU_RESOURCE, 0) or 0)
    return total


def _card_ids(pod: JSON) -> list[int] | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.GPU_IDS)
    if raw is None:
        return None
    return [int(c) for c in raw.split(",") if c.strip().isdigit()]


def held_cards(pods: Iterable[JSON], capacity: Mapping[str, int]) -> dict[str, int]:
    """Cards held on each node of `capacity` by its live pods: the distinct cards named in
    gpusched.io/gpu-ids, plus one per nvidia.com/gpu asked by pods without that annotation;
    never more than the node has."""
    ids: dict[str, set[int]] = {n: set() for n in capacity}
    anonymous: dict[str, int] = dict.fromkeys(capacity, 0)
    for pod in pods:
        node = pod["spec"].get("nodeName", "")
        if node not in capacity or not live(pod):
            continue
        named = _card_ids(pod)
        if named is None:
            anonymous[node] += _whole_cards(pod)
        else:
            ids[node].update(named)
    return {n: min(capacity[n], len(ids[n]) + anonymous[n]) for n in capacity}


@dataclass(frozen=True)
class Outcome:
    """What one scheduler made of the workload."""

    total_cards: int
    held: Mapping[str, int]  # node -> cards held
    capacity: Mapping[str, int]  # node -> cards
    used_milli: int  # the live pods' real GPU need
    bound: Mapping[str, int]  # controller -> live bound pods
    wanted: Mapping[str, int]  # controller -> pods it asks for
    pending: int  # pods without a node
    parts: Sequence[Part] = field(default=PARTS)
    # Cards held per node when the gang arrived (before its pods): its chance to start.
    held_before_gang: Mapping[str, int] = field(default_factory=dict)

    @property
    def held_total(self) -> int:
        return sum(self.held.values())

    @property
    def used_share(self) -> float:
        """How much of the held cards the pods really use (1.0: all of it)."""
        return self.used_milli / (1000 * self.held_total) if self.held_total else 0.0

    def gang_cards(self) -> int:
        """Cards each gang member asks for (0 without a gang)."""
        return max((p.cards for p in self.parts if p.gang), default=0)

    def free_before_gang(self) -> int:
        return sum(self.capacity[n] - h for n, h in self.held_before_gang.items())

    def fragmented_before_gang(self) -> int:
        """Free cards a gang member could not use when the gang arrived: those on nodes with
        fewer free cards than one member asks for (fragmentation measured against the pod
        that is waiting, as the FGD paper measures it against the workload)."""
        need = self.gang_cards()
        free = (self.capacity[n] - h for n, h in self.held_before_gang.items())
        return sum(f for f in free if f < need)

    @property
    def largest_free_block(self) -> int:
        """The most free cards on any one node: the largest pod that can still start."""
        return max((self.capacity[n] - h for n, h in self.held.items()), default=0)

    def started(self, kind: str) -> tuple[int, int]:
        """(controllers of `kind` with every pod running, controllers of `kind`)."""
        parts = [p for p in self.parts if p.kind == kind and not p.gang]
        done = sum(1 for p in parts if self.bound.get(p.name, 0) >= p.pods)
        return done, len(parts)

    def replicas(self) -> tuple[int, int]:
        parts = [p for p in self.parts if p.kind == "Deployment"]
        return sum(min(self.bound.get(p.name, 0), p.pods) for p in parts), sum(
            p.pods for p in parts
        )


def outcome(
    pods: Iterable[JSON],
    capacity: Mapping[str, int],
    parts: Sequence[Part] = PARTS,
    *,
    before_gang: Iterable[JSON] = (),
) -> Outcome:
    """Measure the demo namespace's pods (`capacity`: GPU cards per node; `before_gang`:
    the pods as they were when the gang's wave was applied)."""
    pods = list(pods)
    bound: dict[str, int] = {}
    used = 0
    pending = 0
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if not (pod.get("spec") or {}).get("nodeName"):
            pending += 1
            continue
        if not live(pod):
            continue
        group = labels.get(GROUP_LABEL, "")
        bound[group] = bound.get(group, 0) + 1
        used += int(labels.get(NEED_LABEL) or 0)
    return Outcome(
        total_cards=sum(capacity.values()),
        held=held_cards(pods, capacity),
        capacity=dict(capacity),
        used_milli=used,
        bound=bound,
        wanted={p.name: p.pods for p in parts},
        pending=pending,
        parts=tuple(parts),
        held_before_gang=held_cards(before_gang, capacity),
    )


@dataclass(frozen=True)
class Row:
    metric: str
    ours: str
    theirs: str
    # The numbers compared, and which way is better (None: shown, not judged).
    a: float = 0.0
    b: float = 0.0
    better: str | None = None
    short: str = ""  # how the verdict names the row

    @property
    def winner(self) -> str:
        """'gpusched', 'kube-scheduler', '=' or '' (not judged)."""
        if self.better is None:
            return ""
        if self.a == self.b:
            return "="
        ours_higher = self.a > self.b
        return "gpusched" if ours_higher == (self.better == HIGHER) else "kube-scheduler"


def rows(ours: Outcome, theirs: Outcome) -> list[Row]:
    out: list[Row] = []
    out.append(
        Row(
            "GPU cards held",
            f"{ours.held_total} / {ours.total_cards}",
            f"{theirs.held_total} / {theirs.total_cards}",
        )
    )
    out.append(
        Row(
            "GPU work placed (cards' worth)",
            f"{ours.used_milli / 1000:.1f}",
            f"{theirs.used_milli / 1000:.1f}",
            ours.used_milli,
            theirs.used_milli,
            HIGHER,
            "GPU work placed",
        )
    )
    out.append(
        Row(
            "held cards really used",
            f"{ours.used_share:.0%}",
            f"{theirs.used_share:.0%}",
            round(ours.used_share, 4),
            round(theirs.used_share, 4),
            HIGHER,
            "use of held cards",
        )
    )
    for part in ours.parts:
        if not part.gang:
            continue
        a, b = ours.bound.get(part.name, 0), theirs.bound.get(part.name, 0)
        label = f"gang Job {part.name} ({part.pods} x {part.cards} GPUs) running"
        out.append(
            Row(
                label,
                f"{a}/{part.pods}" + (" started" if a >= part.pods else " (not started)"),
                f"{b}/{part.pods}" + (" started" if b >= part.pods else " (not started)"),
                a,
                b,
                HIGHER,
                f"gang {part.name}",
            )
        )
    (ja, jn), (jb, _) = ours.started("Job"), theirs.started("Job")
    out.append(Row("other Jobs fully running", f"{ja}/{jn}", f"{jb}/{jn}", ja, jb, HIGHER, "Jobs"))
    (ra, rn), (rb, _) = ours.replicas(), theirs.replicas()
    out.append(
        Row("Deployment replicas running", f"{ra}/{rn}", f"{rb}/{rn}", ra, rb, HIGHER, "replicas")
    )
    out.append(
        Row(
            "pods pending",
            str(ours.pending),
            str(theirs.pending),
            ours.pending,
            theirs.pending,
            LOWER,
            "pending",
        )
    )
    need = ours.gang_cards()
    if need:
        out.append(
            Row(
                "free cards when the gang arrived",
                str(ours.free_before_gang()),
                str(theirs.free_before_gang()),
            )
        )
        fa, fb = ours.fragmented_before_gang(), theirs.fragmented_before_gang()
        out.append(
            Row(
                f"  of them fragmented (on nodes with < {need} free)",
                str(fa),
                str(fb),
                fa,
                fb,
                LOWER,
                "fragmentation",
            )
        )
    out.append(
        Row(
            "largest free block at the end (cards, one node)",
            str(ours.largest_free_block),
            str(theirs.largest_free_block),
            ours.largest_free_block,
            theirs.largest_free_block,
            HIGHER,
            "largest free block",
        )
    )
    return out


def verdict(table_rows: Sequence[Row]) -> str:
    """One line from the judged rows: who is better on which, nothing claimed that the
    numbers do not show."""
    judged = [r for r in table_rows if r.better is not None]
    ours = [r.short for r in judged if r.winner == "gpusched"]
    theirs = [r.short for r in judged if r.winner == "kube-scheduler"]
    equal = [r.short for r in judged if r.winner == "="]
    if not ours and not theirs:
        return f"Verdict: no difference on any of the {len(judged)} judged rows."
    if ours and not theirs:
        head = f"gpusched ahead: better on {len(ours)} of {len(judged)} rows{_names(ours)}"
        head += ", worse on none"
    elif theirs and not ours:
        head = f"kube-scheduler ahead: better on {len(theirs)} of {len(judged)} rows"
        head += f"{_names(theirs)}, worse on none"
    else:
        head = (
            f"mixed: gpusched better on {len(ours)} of {len(judged)} rows{_names(ours)},"
            f" kube-scheduler better on {len(theirs)}{_names(theirs)}"
        )
    if equal:
        head += f", equal on {len(equal)}{_names(equal)}"
    return f"Verdict: {head}."


def _names(names: Sequence[str]) -> str:
    return f" ({', '.join(names)})" if names else ""


LEGEND = (
    ("GPU cards held", "cards at least partly given to a running pod, of all cards."),
    (
        "GPU work placed",
        "what the running pods really need, in cards (a 500 milli-GPU inference replica"
        " counts 0.5): the same workload, so more means more of it runs.",
    ),
    (
        "held cards really used",
        "work placed / cards held. kube-scheduler cannot share a card, so a half-card"
        " replica holds a whole one.",
    ),
    (
        "gang Job",
        "the all-or-nothing training Job (an Indexed Job whose PodGroup, minCount = its"
        " pods, both schedulers honour): started only when every member runs.",
    ),
    ("other Jobs", "Jobs with all their pods running."),
    ("Deployment replicas", "replicas with a node, of those asked for."),
    ("pods pending", "pods no node was found for (Unschedulable)."),
    (
        "free cards when the gang arrived",
        "cards no pod held once the first three waves were placed.",
    ),
    (
        "fragmentation",
        "of those free cards, the free cards on nodes with fewer free cards than one gang member"
        " needs: free, but of no use to the job waiting (fewer is better). Spreading leaves"
        " a few free cards on every node; packing leaves whole blocks.",
    ),
    (
        "largest free block",
        "the most free cards on one node: the biggest pod the cluster could still start.",
    ),
)


def render(table_rows: Sequence[Row], *, title: str) -> Table:
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("gpusched", justify="right")
    table.add_column("kube-scheduler", justify="right")
    table.add_column("better")
    for r in table_rows:
        table.add_row(r.metric, r.ours, r.theirs, r.winner or "-")
    return table


def legend_lines() -> list[str]:
    return [f"  {name}: {text}" for name, text in LEGEND]

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
    outcome: str = ""  # the outcome it measures (OUTCOMES): its rows are judged together

    @property
    def winner(self) -> str:
        """'gpusched', 'kube-scheduler', '=' or '' (not judged)."""
        if self.better is None:
            return ""
        if self.a == self.b:
            return "="
        ours_higher = self.a > self.b
        return "gpusched" if ours_higher == (self.better == HIGHER) else "kube-scheduler"


# The outcomes the verdict counts, in table order. The rows of one outcome are not
# independent (a gang that does not start lowers "GPU work placed" and raises "pods
# pending" as well), so each outcome counts once however many of its rows move.
WORK = "work running"
CARD_USE = "card use"
FRAGMENTATION = "fragmentation"
OUTCOMES = (WORK, CARD_USE, FRAGMENTATION)


def rows(ours: Outcome, theirs: Outcome) -> list[Row]:
    """The table's rows, grouped by outcome (OUTCOMES order)."""
    out: list[Row] = []
    out.append(
        Row(
            "GPU work placed (cards' worth)",
            f"{ours.used_milli / 1000:.1f}",
            f"{theirs.used_milli / 1000:.1f}",
            ours.used_milli,
            theirs.used_milli,
            HIGHER,
            "GPU work placed",
            WORK,
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
                WORK,
            )
        )
    (ja, jn), (jb, _) = ours.started("Job"), theirs.started("Job")
    out.append(
        Row("other Jobs fully running", f"{ja}/{jn}", f"{jb}/{jn}", ja, jb, HIGHER, "Jobs", WORK)
    )
    (ra, rn), (rb, _) = ours.replicas(), theirs.replicas()
    out.append(
        Row(
            "Deployment replicas running",
            f"{ra}/{rn}",
            f"{rb}/{rn}",
            ra,
            rb,
            HIGHER,
            "replicas",
            WORK,
        )
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
            WORK,
        )
    )
    out.append(
        Row(
            "GPU cards held",
            f"{ours.held_total} / {ours.total_cards}",
            f"{theirs.held_total} / {theirs.total_cards}",
            outcome=CARD_USE,
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
            CARD_USE,
        )
    )
    need = ours.gang_cards()
    if need:
        out.append(
            Row(
                "free cards when the gang arrived",
                str(ours.free_before_gang()),
                str(theirs.free_before_gang()),
                outcome=FRAGMENTATION,
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
                "fragmented cards",
                FRAGMENTATION,
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
            FRAGMENTATION,
        )
    )
    return out


@dataclass(frozen=True)
class Judged:
    """One outcome judged on its rows together: `winner` is 'gpusched' or 'kube-scheduler'
    (better on at least one row, worse on none), '=' (equal on all), 'split' (each side
    better on some row) or '' (no judged row); `rows`: the rows that decided it."""

    outcome: str
    winner: str
    rows: tuple[str, ...]


def judge(table_rows: Sequence[Row]) -> list[Judged]:
    """Each outcome with a judged row, in table order."""
    order: list[str] = []
    by: dict[str, list[Row]] = {}
    for r in table_rows:
        if r.better is None:
            continue
        key = r.outcome or r.short or r.metric
        if key not in by:
            order.append(key)
        by.setdefault(key, []).append(r)
    out: list[Judged] = []
    for key in order:
        wins = {r.winner for r in by[key]} - {"="}
        if not wins:
            out.append(Judged(key, "=", ()))
        elif len(wins) == 1:
            (side,) = wins
            out.append(Judged(key, side, tuple(r.short for r in by[key] if r.winner == side)))
        else:
            split = (f"{r.short} to {r.winner}" for r in by[key] if r.winner in wins)
            out.append(Judged(key, "split", tuple(split)))
    return out


def verdict(table_rows: Sequence[Row], unsettled: Sequence[str] = ()) -> str:
    """One line: who is better on which outcomes (judge), nothing claimed that the numbers
    do not show. With `unsettled` (waves that did not settle, named) no verdict: the
    numbers are of pods still being placed."""
    if unsettled:
        return (
            f"Verdict: not measured: {'; '.join(unsettled)} did not settle in time, so the"
            " table shows pods still being placed and judges nothing."
        )
    judged = judge(table_rows)
    n = len(judged)
    ours = [_outcome_name(j) for j in judged if j.winner == "gpusched"]
    theirs = [_outcome_name(j) for j in judged if j.winner == "kube-scheduler"]
    split = [_outcome_name(j) for j in judged if j.winner == "split"]
    equal = [j.outcome for j in judged if j.winner == "="]
    if not ours and not theirs:
        if not split:
            return f"Verdict: no difference on any of the {n} outcomes."
        head = f"neither ahead: split on {len(split)} of {n} outcomes{_names(split)}"
        split = []
    elif ours and not theirs:
        head = f"gpusched ahead: better on {len(ours)} of {n} outcomes{_names(ours)}"
        head += ", worse on none"
    elif theirs and not ours:
        head = f"kube-scheduler ahead: better on {len(theirs)} of {n} outcomes"
        head += f"{_names(theirs)}, worse on none"
    else:
        head = (
            f"mixed: gpusched better on {len(ours)} of {n} outcomes{_names(ours)},"
            f" kube-scheduler better on {len(theirs)}{_names(theirs)}"
        )
    if split:
        head += f", split on {len(split)}{_names(split)}"
    if equal:
        head += f", equal on {len(equal)}{_names(equal)}"
    return f"Verdict: {head}."


def _outcome_name(j: Judged) -> str:
    """'work running: gang train, pending': the outcome and the rows that decided it."""
    return f"{j.outcome}: {', '.join(j.rows)}" if j.rows else j.outcome


def _names(names: Sequence[str]) -> str:
    return f" ({'; '.join(names)})" if names else ""


LEGEND = (
    (
        "GPU work placed",
        "what the running pods really need, in cards (a 500 milli-GPU inference replica"
        " counts 0.5): the same workload, so more means more of it runs.",
    ),
    (
        "gang Job",
        "the all-or-nothing training Job (an Indexed Job whose PodGroup, minCount = its"
        " pods, both schedulers honour): started only when every member runs.",
    ),
    ("other Jobs", "Jobs with all their pods running."),
    ("Deployment replicas", "replicas with a node, of those asked for."),
    ("pods pending", "pods no node was found for (Unschedulable)."),
    ("GPU cards held", "cards at least partly given to a running pod, of all cards."),
    (
        "held cards really used",
        "work placed / cards held. kube-scheduler cannot share a card, so a half-card"
        " replica holds a whole one.",
    ),
    (
        "free cards when the gang arrived",
        "cards no pod held once the first three waves were placed.",
    ),
    (
        "of them fragmented",
        "the free cards on nodes with fewer free cards than one gang member needs: free,"
        " but of no use to the job waiting (fewer is better). Spreading leaves a few free"
        " cards on every node; packing leaves whole blocks.",
    ),
    (
        "largest free block",
        "the most free cards on one node: the biggest pod the cluster could still start.",
    ),
    (
        "Verdict",
        "counts outcomes, not rows: the rows of one outcome (grouped in the table) move"
        " together (a gang that does not start lowers GPU work placed and raises pods"
        " pending too), so each outcome counts once, for the side better on at least one of"
        " its rows and worse on none ('split' when each side wins a row). Rows marked - are"
        " shown, not judged. If a wave did not settle in time there is no verdict.",
    ),
)


def render(table_rows: Sequence[Row], *, title: str, judged: bool = True) -> Table:
    """The rows under their outcome, a line between outcomes; without `judged` (a wave did
    not settle) no "better" column."""
    table = Table(title=title)
    table.add_column("outcome")
    table.add_column("metric")
    table.add_column("gpusched", justify="right")
    table.add_column("kube-scheduler", justify="right")
    if judged:
        table.add_column("better")
    for i, r in enumerate(table_rows):
        first = i == 0 or table_rows[i - 1].outcome != r.outcome
        last = i + 1 == len(table_rows) or table_rows[i + 1].outcome != r.outcome
        cells = [r.outcome if first else "", r.metric, r.ours, r.theirs]
        if judged:
            cells.append(r.winner or "-")
        table.add_row(*cells, end_section=last)
    return table


def legend_lines() -> list[str]:
    return [f"  {name}: {text}" for name, text in LEGEND]


def foreign_gpu_pods(pods: Iterable[JSON], nodes: Iterable[str], namespace: str) -> list[str]:
    """Pods outside `namespace` that hold GPUs on `nodes`, or ask for GPUs and have no node
    yet (they may get one during the demo): "namespace/name", sorted. The demo counts only
    its own namespace's pods against the nodes' full capacity, so with any of these its
    cluster is not the fresh one it is compared with."""
    fleet = set(nodes)
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("namespace") == namespace or meta.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        node = (pod.get("spec") or {}).get("nodeName")
        if node and node not in fleet:
            continue
        ann = meta.get("annotations") or {}
        if _whole_cards(pod) or keys.GPU_IDS in ann or keys.GPU_MILLI in ann:
            out.append(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
    return sorted(out)

"""Nodes whose device-plugin GPUs are over-committed by gpusched's shared pods.

On a cluster still on NVIDIA's device plugin, a gpusched shared pod (annotation
gpusched.io/gpu-milli, no nvidia.com/gpu) sits on a card only gpusched knows of: kube-scheduler
and the kubelet count nvidia.com/gpu requests against status.allocatable["nvidia.com/gpu"]
and nothing else. So with card 0 of an 8-card node filled by six shared pods, another
scheduler may bind a pod asking `nvidia.com/gpu: 8` there, and the device plugin hands it all
eight cards, card 0 included. gpusched cannot prevent that (the placement is advisory on this
path); it can say so. For a node that advertises nvidia.com/gpu, the cards in use are

    nvidia.com/gpu requested by the bound pods of other schedulers
  + nvidia.com/gpu requested by gpusched's own bound pods (whole cards)
  + the distinct cards gpusched's shared pods sit on (one per card, however many share it)

and the node is over-committed when that exceeds its allocatable count. `node_gpu_use` is
that sum for one node; `OvercommitTracker` keeps it for the nodes whose pods or allocatable
changed since the last look (the daemon marks them from its watches and looks once a tick),
and reports a node only when its excess changes: entering, changing, resolved. The daemon
turns the changes into Events, log lines and metrics (daemon/daemon.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpusched.core.cache.cache import ClusterCache
from gpusched.model import keys
from gpusched.model.pod import GpuKind, PodInfo

# Pods of other schedulers named in a message; the rest are counted ("and 3 more").
MAX_NAMED = 3


@dataclass(frozen=True, slots=True)
class TheirPod:
    """A bound pod of another scheduler holding device-plugin GPUs."""

    key: str  # namespace/name
    scheduler: str
    gpus: int


@dataclass(frozen=True, slots=True)
class GpuUse:
    """The device-plugin cards in use on one node, by whom."""

    node: str
    cards: int  # status.allocatable["nvidia.com/gpu"]
    theirs: int  # nvidia.com/gpu requested by pods of other schedulers
    whole: int  # nvidia.com/gpu requested by gpusched's pods
    shared_cards: int  # distinct cards gpusched's shared pods sit on
    shared_pods: int
    # Other schedulers' pods with nvidia.com/gpu, the largest request first.
    their_pods: tuple[TheirPod, ...] = ()

    @property
    def used(self) -> int:
        return self.theirs + self.whole + self.shared_cards

    @property
    def excess(self) -> int:
        return max(0, self.used - self.cards)

    def describe(self) -> str:
        """The Warning Event's message: the numbers, and the other schedulers' pods."""
        named = ", ".join(f"{p.key} ({p.scheduler}, {p.gpus})" for p in self.their_pods[:MAX_NAMED])
        more = len(self.their_pods) - MAX_NAMED
        if more > 0:
            named += f" and {more} more"
        theirs = f"{self.theirs} {keys.GPU_RESOURCE} requested by pods of other schedulers"
        if named:
            theirs += f" ({named})"
        return (
            f"{self.used} GPUs in use for {self.cards} allocatable {keys.GPU_RESOURCE},"
            f" {self.excess} over: {theirs}, {self.whole} by gpusched's whole-GPU pods,"
            f" {self.shared_cards} card(s) shared by {self.shared_pods} gpusched pod(s) the"
            " device plugin does not count; a card may be handed to two pods at once."
            " Dedicate shared-GPU nodes with a taint only gpusched pods tolerate (README,"
            " 'Running next to the device plugin')"
        )

    def describe_resolved(self) -> str:
        return (
            f"GPU over-commit resolved: {self.used} GPUs in use for {self.cards} allocatable"
            f" {keys.GPU_RESOURCE} ({self.theirs} by pods of other schedulers, {self.whole} by"
            f" gpusched's whole-GPU pods, {self.shared_cards} card(s) shared by gpusched pods)"
        )


def node_gpu_use(
    node: str,
    cards: int,
    pods: Iterable[tuple[PodInfo, Iterable[int]]],
    ours: Callable[[PodInfo], bool],
) -> GpuUse:
    """The cards in use on `node` (module docstring) from its bound, non-terminal pods, each
    with the cards it holds (only read for gpusched's shared pods). `ours`: the pod is
    gpusched's (its schedulerName is one of our profiles)."""
    theirs = whole = shared_pods = 0
    shared: set[int] = set()
    their_pods: list[TheirPod] = []
    for pod, held in pods:
        req = pod.request
        if not ours(pod):
            # kube-scheduler charges nvidia.com/gpu only; another scheduler's "shared" pod
            # holds no device-plugin card.
            if req.gpu_cards:
                theirs += req.gpu_cards
                their_pods.append(TheirPod(pod.key, pod.scheduler_name, req.gpu_cards))
        elif req.gpu_cards:
            whole += req.gpu_cards
        elif req.kind is GpuKind.SHARED:
            shared_pods += 1
            shared.update(held)
    their_pods.sort(key=lambda p: (-p.gpus, p.key))
    return GpuUse(node, cards, theirs, whole, len(shared), shared_pods, tuple(their_pods))


@dataclass(frozen=True, slots=True)
class Change:
    """A change of a node's excess: `before` the over-committed use reported last (None: it
    was not over-committed); `now` the use now (None: the node is gone or no longer
    advertises nvidia.com/gpu)."""

    node: str
    before: GpuUse | None
    now: GpuUse | None

    @property
    def resolved(self) -> bool:
        return self.now is None or self.now.excess == 0


class OvercommitTracker:
    """Over-committed nodes, recomputed only for the nodes marked since the last look."""

    def __init__(self, ours: Callable[[PodInfo], bool]) -> None:
        self.ours = ours
        self.over: dict[str, GpuUse] = {}
        self._dirty: set[str] = set()

    def mark(self, node: str) -> None:
        """A pod on `node` came, changed or went, or the node itself changed."""
        if node:
            self._dirty.add(node)

    @property
    def marked(self) -> frozenset[str]:
        """The nodes the next `evaluate` recomputes."""
        return frozenset(self._dirty)

    def forget(self, node: str) -> Change | None:
        """The node is gone: a resolution if it was over-committed."""
        self._dirty.discard(node)
        before = self.over.pop(node, None)
        return Change(node, before, None) if before is not None else None

    def evaluate(self, cache: ClusterCache, cards_of: Callable[[str], int]) -> list[Change]:
        """Recompute the marked nodes; the changes of excess, by node name. `cards_of`: the
        node's allocatable nvidia.com/gpu, -1 when it has none (no device plugin) or is
        unknown."""
        changes: list[Change] = []
        dirty, self._dirty = self._dirty, set()
        for node in sorted(dirty):
            before = self.over.get(node)
            cards = cards_of(node)
            now = node_gpu_use(node, cards, _bound(cache, node), self.ours) if cards >= 0 else None
            if now is None or now.excess == 0:
                if before is not None:
                    del self.over[node]
                    changes.append(Change(node, before, now))
                continue
            self.over[node] = now
            if before is None or before.excess != now.excess:
                changes.append(Change(node, before, now))
        return changes


def _bound(cache: ClusterCache, node: str) -> Iterable[tuple[PodInfo, Iterable[int]]]:
    """The pods bound to `node` (assumed ones are not yet: a binding may still fail) with
    the cards the cache charges them."""
    for pod in cache.pods_on_node(node):
        entry = cache.get(pod.uid)
        if entry is None or entry.assumed or not pod.node_name or pod.terminal:
            continue
        held = entry.alloc.cards if entry.alloc is not None else pod.gpu_ids
        yield pod, held

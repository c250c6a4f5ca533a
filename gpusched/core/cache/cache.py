"""The scheduler's cache: nodes, bound pods and assumed pods, kept in the snapshot columns.

A pod's life in the cache (kube-scheduler's backend/cache/interface.go, simplified):

    +------------------------------------------------+
    |                                Add (watch)     |
    |  Assume          Add (watch)                   v
  Initial ------> Assumed ------------> Added <--> Updated
    |               |   \\                             |
    |               |    \\ Forget                     | Remove
    |               v     -------> Initial            v
    +---------------------------------------------> Deleted

Card accounting for bound pods comes from their gpusched.io/gpu-ids annotation, so a
restarted scheduler recovers the exact per-card state from the API. Pods bound by another
scheduler (no annotation) are placed on cards by the same best-fit rule we use, which is
what a device plugin handing out free cards does in effect; such pods are counted as
`inferred` and keep the cards they were inferred on while they run.

The annotations are evidence, not truth: a pod's owner can write gpusched.io/gpu-ids and
gpusched.io/gpu-milli-assigned (the admission policy in manifests/ forbids it, but the cache
must not depend on it). The device a pod really uses is the one the scheduler assigned when
it bound the pod (the Binding carries the assignment; the device plugin or webhook reads it
when the containers start and the kubelet keeps it across restarts), so the rule is:

* The first assignment the cache sees for a pod (its own Allocation when it assumed the
  pod, else the first bound version the watch delivers) is the pod's claim; the cache keeps
  it for the pod's life. A later version whose assignment differs from that claim is
  "changed after binding".
* An assignment is valid when it is exactly what the scheduler writes for the request:
  gpu-ids parse (ASCII indices, each once) and name cards the node has; a whole-card pod
  names exactly as many cards as it requests (nvidia.com/gpu) and carries no
  gpu-milli-assigned; a shared pod names one card and its gpu-milli-assigned, if present,
  is ASCII digits between the share its request implies on that card (share_on_card) and
  1000; a pod without a GPU request carries neither annotation; a GPU pod without gpu-ids
  (another scheduler's pod) carries no gpu-milli-assigned either.
* A valid, unchanged assignment is charged as written (a shared pod at its
  gpu-milli-assigned, else at its request's share; no ids: best-fit inference).
* An invalid or changed assignment is charged conservatively, never cheaper than the
  request, and stays so until the pod is gone (a tenant who edited it once is not trusted
  again): every card the pod has been charged or has named since it was first seen (the
  first claim's cards stay charged: a change never moves the charge off cards the device
  may be using), plus the cards it names now that the node has, topped up by inference to
  the number its request needs (nvidia.com/gpu, one for a shared pod), each charged as a
  whole card (1000 milli and all of its memory). A pod without a GPU request that names
  cards is charged those cards whole too: a webhook honouring the annotation would give
  them to it.
* Each such charge reports a warning naming the pod, what is wrong and what is charged
  (`ClusterCache.pod_warning`, which core/events.py hands to the daemon for a Warning Event).

Validity is checked whenever the pod is charged (first sight, its node's arrival, a resize or
an assignment change): a card that disappears from the node under a running pod makes the
next re-charge conservative, which is the safe reading of a card the pod may still hold.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gpusched.core.cache.snapshot import Snapshot
from gpusched.framework.interfaces import Allocation, PodMatcher, Rows, UsedPorts
from gpusched.model import keys, quota
from gpusched.model.node import FULL_CARD_MILLI, NodeModel
from gpusched.model.pod import GpuKind, PodInfo, PodRequest, parse_gpu_ids
from gpusched.model.share import share_on_card

_MILLI = re.compile(r"[0-9]{1,4}")  # gpu-milli-assigned: ASCII digits; above 1000 is invalid


@dataclass(slots=True)
class PodEntry:
    pod: PodInfo
    alloc: Allocation | None  # None while its node is unknown to the cache
    # Placed by this scheduler, not yet confirmed by the watch. Never expires: its binding
    # is in flight, of unknown outcome, or done (the cards are in use on the node).
    assumed: bool = False
    inferred: bool = False
    # The node the pod is filed under in `_by_node`: kept apart from `alloc`, which is None
    # while the node is unknown, and from `pod.node_name`, which an assumed pod lacks.
    node: str = ""
    # The assignment the cache first saw (the pod's claim) and the latest one.
    first: Claim | None = None
    claim: Claim | None = None
    # Every card the pod has been charged or has named while in the cache.
    held: tuple[int, ...] = ()
    # Why the pod is charged conservatively ("" while its assignment is trusted); sticky.
    suspect: str = ""


@dataclass(frozen=True, slots=True)
class Claim:
    """A bound pod's assignment annotations: the sorted card indices, or the raw text when it
    does not parse, None when absent; gpu-milli-assigned as an int when ASCII digits, else
    the raw text, None when absent."""

    ids: tuple[int, ...] | str | None = None
    milli: int | str | None = None

    @classmethod
    def of(cls, pod: PodInfo) -> Claim:
        ann = pod.annotations
        raw_ids = ann.get(keys.GPU_IDS)
        ids: tuple[int, ...] | str | None = (
            tuple(sorted(pod.gpu_ids)) if pod.gpu_ids else None if raw_ids is None else str(raw_ids)
        )
        raw = ann.get(keys.GPU_MILLI_ASSIGNED)
        milli: int | str | None = None
        if raw is not None:
            text = str(raw)
            # ASCII digits only: isdigit() also takes '²', which int() refuses.
            milli = int(text) if _MILLI.fullmatch(text) else text
        return cls(ids, milli)

    @classmethod
    def assigned(cls, pod: PodInfo, alloc: Allocation) -> Claim:
        """What the scheduler writes for `alloc` (plugins/gpu_fit PreBind)."""
        if not alloc.cards:
            return cls()
        milli = alloc.milli[0] if not pod.request.gpu_cards and alloc.milli else None
        return cls(tuple(sorted(alloc.cards)), milli)

    def describe(self) -> str:
        if self.ids is None and self.milli is None:
            return "no assignment"
        parts = []
        if self.ids is not None:
            text = ",".join(map(str, self.ids)) if isinstance(self.ids, tuple) else self.ids
            parts.append(f"{keys.GPU_IDS}={text!r}")
        if self.milli is not None:
            parts.append(f"{keys.GPU_MILLI_ASSIGNED}={str(self.milli)!r}")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class DeviceCharge:
    """Card shares allocated DRA devices hold on one node: card `cards[i]` holds
    `milli[i]` and `mem_mib[i]`."""

    node: str
    cards: tuple[int, ...]
    milli: tuple[int, ...]
    mem_mib: tuple[int, ...]


@dataclass(slots=True)
class CacheStats:
    over_allocated: int = 0
    inferred: int = 0
    # The latest problems only: a long-running daemon must not grow this without bound.
    warnings: deque[str] = field(default_factory=lambda: deque(maxlen=100))


class ClusterCache:
    def __init__(self, snapshot: Snapshot | None = None) -> None:
        self.snapshot = snapshot or Snapshot()
        self.pods: dict[str, PodEntry] = {}
        # The assumed pods (placed, not yet seen bound): few (bindings in flight, gang
        # members waiting at Permit), read by plugins that must count what is placed but
        # not yet running (Thermal: heat the telemetry cannot show yet).
        self._assumed: dict[str, PodEntry] = {}
        self._by_node: dict[str, set[str]] = {}
        self._jobs: dict[str, Counter[int]] = {}
        # Host ports in use per node (NodePorts), only nodes where a pod holds one, kept
        # with `_by_node` so the filter reads a few nodes, never every pod.
        self._ports: dict[str, dict[tuple[str, int], Counter[str]]] = {}
        # Pods carrying pod (anti-)affinity, and those with required anti-affinity
        # (kube-scheduler's PodsWithAffinity / PodsWithRequiredAntiAffinity), by uid: what
        # InterPodAffinity reads of other pods' terms, never every pod.
        self._with_affinity: dict[str, None] = {}
        self._with_required_anti: dict[str, None] = {}
        # Pods by namespace and label, built on the first count (a cluster without pod
        # affinity or topology spread never pays for it), then kept up to date.
        self._labels: _LabelIndex | None = None
        # Namespace name -> labels (namespaceSelector), from the daemon's namespace watch.
        self.namespaces: dict[str, Mapping[str, str]] = {}
        # What every pod in the cache (bound or assumed, not finished) uses in quota units
        # (model/quota.py), summed per namespace: a tenant's usage is its namespaces' sum
        # (Handle.tenant_usage), read by ElasticQuota's PreFilter for every pod. Each pod's
        # charge is kept as it was added, so its removal takes back exactly that even if
        # its request changed since (an in-place resize re-charges through _usage_set).
        self._ns_usage: dict[str, quota.Usage] = {}
        self._usage_of: dict[str, tuple[str, quota.Usage]] = {}
        # Bumped when a namespace enters or leaves `_ns_usage` (Handle.tenant_usage groups
        # the namespaces by tenant once per change).
        self.namespace_version = 0
        # Told the namespace whose usage changed (the daemon republishes its tenant's
        # ElasticQuota status.used).
        self.usage_changed: Callable[[str], None] = _ignore_namespace
        # Namespace -> row -> milli-GPUs its pods hold there (TenantLoad's per-node load),
        # kept wherever a row is charged or given back (so only pods on a known row).
        self._ns_gpu_rows: dict[str, Counter[int]] = {}
        self.stats = CacheStats()
        # Card shares held by allocated DRA devices (core/dra_ledger.py), by key (a claim's
        # uid): (node, cards, milli, MiB), and the row each is charged on while its node is
        # known. They count against the cards, not as pods.
        self._device_charges: dict[str, DeviceCharge] = {}
        self._device_rows: dict[str, int] = {}
        # Told of every pod charged conservatively (core/events.py forwards it to the daemon,
        # which writes a Warning Event); the message names the pod, the fault and the charge.
        self.pod_warning: Callable[[PodInfo, str], None] = _ignore

    # -- nodes -----------------------------------------------------------------------------

    def upsert_node(self, node: NodeModel) -> int:
        known = node.name in self.snapshot.rows
        row = self.snapshot.upsert_node(node)
        if not known:
            # Pods the watch delivered before their node: account them now.
            for uid in list(self._by_node.get(node.name, ())):
                entry = self.pods[uid]
                if entry.alloc is None:
                    self._apply(entry, row)
            for key, charge in self._device_charges.items():
                if charge.node == node.name and key not in self._device_rows:
                    self._charge_devices(key, charge, row)
        return row

    def remove_node(self, name: str) -> None:
        row = self.snapshot.row_of(name)
        if row < 0:
            return
        for uid in self._by_node.get(name, ()):
            entry = self.pods[uid]
            if entry.alloc is not None:
                self._job_add(entry.pod, entry.alloc.row, -1)
                self._gpu_rows_add(entry.pod, entry.alloc.row, -1)
                entry.alloc = None
        for key in [k for k, r in self._device_rows.items() if r == row]:
            del self._device_rows[key]  # the row goes; the charge waits for the node
        self.snapshot.remove_node(name)

    # -- pods ------------------------------------------------------------------------------

    def assume(self, pod: PodInfo, alloc: Allocation) -> None:
        if pod.uid in self.pods:
            raise ValueError(f"pod {pod.key} is already in the cache")
        entry = PodEntry(pod, None, assumed=True, node=alloc.node)
        entry.first = entry.claim = Claim.assigned(pod, alloc)
        entry.held = tuple(alloc.cards)
        self.pods[pod.uid] = entry
        self._assumed[pod.uid] = entry
        self._by_node.setdefault(alloc.node, set()).add(pod.uid)
        self._ports_add(pod, alloc.node, 1)
        self._file(pod, 1)
        self._take(entry, alloc)
        self._usage_set(pod)

    def forget(self, uid: str) -> PodEntry | None:
        """Drop an assumed pod (its binding failed); a confirmed pod is not touched."""
        entry = self.pods.get(uid)
        if entry is None or not entry.assumed:
            return None
        self._drop(uid)
        return entry

    def add_or_update_pod(self, pod: PodInfo) -> None:
        """A bound pod seen by the watch (also confirms an assumed one)."""
        if not pod.node_name or pod.terminal:
            self.remove_pod(pod.uid)
            return
        claim = Claim.of(pod)
        entry = self.pods.get(pod.uid)
        if entry is not None and entry.node != pod.node_name:
            # A pod never changes nodes: this is another pod of the same uid in effect.
            self._drop(pod.uid)
            entry = None
        if entry is None:
            entry = PodEntry(pod, None, node=pod.node_name, first=claim, claim=claim)
            self.pods[pod.uid] = entry
            self._by_node.setdefault(pod.node_name, set()).add(pod.uid)
            self._ports_add(pod, pod.node_name, 1)
            self._file(pod, 1)
        else:
            old = entry.pod
            if old.labels != pod.labels or old.affinity != pod.affinity:
                self._file(old, -1)
                self._file(pod, 1)
            if entry.pod.host_ports != pod.host_ports:  # immutable in the API; kept exact
                self._ports_add(entry.pod, entry.node, -1)
                self._ports_add(pod, entry.node, 1)
            # An in-place resize (on by default since 1.33) changes the request of a running
            # pod, an edit its assignment or its job label: what is charged must follow, or
            # its deletion later returns another amount than was taken (the node drifts) or
            # leaves its old job on the row. Re-charged in place, keeping what the cache knows
            # of the pod.
            if (
                entry.alloc is not None
                and claim == entry.claim
                and entry.pod.request == pod.request
                and entry.pod.job_key == pod.job_key
            ):
                entry.pod = pod
                entry.assumed = False
                self._assumed.pop(pod.uid, None)
                return
            self._uncharge(entry)
            entry.alloc = None
            entry.pod = pod
            entry.assumed = False
            self._assumed.pop(pod.uid, None)
            entry.claim = claim
            if claim != entry.first:
                first = entry.first.describe() if entry.first is not None else "no assignment"
                entry.suspect = (
                    f"GPU assignment changed after binding ({first} -> {claim.describe()})"
                )
        # Charged to its namespace even while its node is unknown: a bound pod is placed.
        self._usage_set(pod)
        row = self.snapshot.row_of(pod.node_name)
        if row >= 0:
            self._apply(entry, row)

    def remove_pod(self, uid: str) -> None:
        if uid in self.pods:
            self._drop(uid)

    def get(self, uid: str) -> PodEntry | None:
        return self.pods.get(uid)

    def is_assumed(self, uid: str) -> bool:
        e = self.pods.get(uid)
        return e is not None and e.assumed

    # -- allocated DRA devices -------------------------------------------------------------

    def charge_devices(self, key: str, charge: DeviceCharge) -> None:
        """Charge `charge` under `key`, replacing what `key` held before."""
        if self._device_charges.get(key) == charge:
            return
        self.release_devices(key)
        self._device_charges[key] = charge
        row = self.snapshot.row_of(charge.node)
        if row >= 0:
            self._charge_devices(key, charge, row)

    def release_devices(self, key: str) -> None:
        charge = self._device_charges.pop(key, None)
        row = self._device_rows.pop(key, None)
        if charge is not None and row is not None:
            self.snapshot.apply_cards(row, charge.cards, charge.milli, charge.mem_mib, -1)

    def device_charges(self) -> Mapping[str, DeviceCharge]:
        return self._device_charges

    def _charge_devices(self, key: str, charge: DeviceCharge, row: int) -> None:
        width = self.snapshot.max_cards
        cards = [c for c in charge.cards if 0 <= c < width]
        if len(cards) != len(charge.cards):
            return  # a card the row cannot hold: the allocator still counts the device
        self.snapshot.apply_cards(row, charge.cards, charge.milli, charge.mem_mib)
        self._device_rows[key] = row

    # -- views for plugins -----------------------------------------------------------------

    def pods_on_node(self, node: str) -> Iterator[PodInfo]:
        for uid in self._by_node.get(node, ()):
            yield self.pods[uid].pod

    def assumed_pods(self) -> Iterator[tuple[PodInfo, str]]:
        """Assumed pods (placed, not yet seen bound) with their node."""
        for entry in self._assumed.values():
            yield entry.pod, entry.node

    def job_rows(self, job_key: str) -> Rows:
        rows = self._jobs.get(job_key)
        if not rows:
            return np.empty(0, np.intp)
        return np.fromiter((r for r, n in rows.items() if n > 0), np.intp)

    def used_host_ports(self) -> Mapping[str, UsedPorts]:
        return self._ports

    def count_matching_pods(self, matcher: PodMatcher) -> NDArray[np.int64]:
        rows = self.snapshot.rows
        out = np.zeros(len(self.snapshot.node_valid), np.int64)
        pods, matches = self.pods, matcher.matches
        hits: list[int] = []
        for uid in self._label_index().candidates(matcher):
            entry = pods[uid]
            if matches(entry.pod):
                row = rows.get(entry.node, -1)
                if row >= 0:
                    hits.append(row)
        if hits:
            np.add.at(out, hits, 1)
        return out

    def _label_index(self) -> _LabelIndex:
        if self._labels is None:
            self._labels = _LabelIndex()
            for entry in self.pods.values():
                self._labels.add(entry.pod, 1)
        return self._labels

    def pods_with_affinity(self, *, required_anti_only: bool = False) -> list[tuple[PodInfo, int]]:
        uids = self._with_required_anti if required_anti_only else self._with_affinity
        rows = self.snapshot.rows
        out: list[tuple[PodInfo, int]] = []
        for uid in uids:
            entry = self.pods[uid]
            row = rows.get(entry.node, -1)
            if row >= 0:
                out.append((entry.pod, row))
        return out

    def namespace_labels(self) -> Mapping[str, Mapping[str, str]]:
        return self.namespaces

    def set_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        self.namespaces[name] = labels

    def remove_namespace(self, name: str) -> None:
        self.namespaces.pop(name, None)

    def allocations(self) -> Iterable[PodEntry]:
        return self.pods.values()

    def namespace_usage(self) -> Mapping[str, quota.Usage]:
        """Per namespace, what its pods in the cache (bound or assumed) use in quota units;
        only namespaces with such pods."""
        return self._ns_usage

    def namespace_gpu_rows(self, namespace: str) -> Mapping[int, int]:
        """Row -> milli-GPUs the namespace's pods charged on that row hold (rows where
        any)."""
        return self._ns_gpu_rows.get(namespace, {})

    def _gpu_rows_add(self, pod: PodInfo, row: int, delta: int) -> None:
        gpu = quota.usage_of(pod.request)[0]
        if not gpu:
            return
        rows = self._ns_gpu_rows.setdefault(pod.namespace, Counter())
        rows[row] += delta * gpu
        if rows[row] <= 0:
            del rows[row]
            if not rows:
                del self._ns_gpu_rows[pod.namespace]

    def _usage_set(self, pod: PodInfo) -> None:
        """Charge `pod` to its namespace, replacing what it was charged before."""
        usage = quota.usage_of(pod.request)
        old = self._usage_of.get(pod.uid)
        if old is not None:
            if old == (pod.namespace, usage):
                return
            self._usage_unset(pod.uid)
        self._usage_of[pod.uid] = (pod.namespace, usage)
        total = self._ns_usage.get(pod.namespace)
        if total is None:
            total = quota.ZERO
            self.namespace_version += 1
        self._ns_usage[pod.namespace] = quota.add(total, usage)
        self.usage_changed(pod.namespace)

    def _usage_unset(self, uid: str) -> None:
        charged = self._usage_of.pop(uid, None)
        if charged is None:
            return
        namespace, usage = charged
        total = quota.add(self._ns_usage[namespace], usage, -1)
        if total[quota.INDEX[quota.PODS]] <= 0:
            del self._ns_usage[namespace]  # its last pod went: nothing is left charged
            self.namespace_version += 1
        else:
            self._ns_usage[namespace] = total
        self.usage_changed(namespace)

    # -- internals -------------------------------------------------------------------------

    def _apply(self, entry: PodEntry, row: int) -> None:
        # All or nothing: the allocation is worked out before anything is charged, so a
        # failure leaves no half-counted entry; the warning goes out once the charge is made.
        self._charge(entry, *self._allocation_of(entry, row))
        if entry.suspect and entry.alloc is not None:
            held = ",".join(map(str, entry.alloc.cards)) or "none"
            message = (
                f"pod {entry.pod.key} on {entry.alloc.node}: {entry.suspect}; charged"
                f" conservatively as whole card(s) {held}"
            )
            self.stats.warnings.append(message)
            self.pod_warning(entry.pod, message)

    def _charge(self, entry: PodEntry, alloc: Allocation, inferred: bool) -> None:
        entry.inferred = inferred
        if inferred:
            self.stats.inferred += 1
        self._take(entry, alloc)

    def _take(self, entry: PodEntry, alloc: Allocation) -> None:
        snap = self.snapshot
        req = entry.pod.request
        snap.apply(
            alloc.row,
            req.cpu_milli,
            req.memory_bytes,
            alloc.cards,
            alloc.milli,
            alloc.mem_mib,
            other=req.other,
        )
        free = snap.card_free_milli[alloc.row]
        # A few cards: scalar reads, not a fancy-indexed copy and two more array calls.
        if any(free[c] < 0 for c in alloc.cards):
            # The API is the truth: keep the pod, but say the node is over-committed.
            self.stats.over_allocated += 1
            self.stats.warnings.append(
                f"pod {entry.pod.key} on {alloc.node} cards {list(alloc.cards)}"
                " over-allocates a card"
            )
        entry.alloc = alloc
        self._job_add(entry.pod, alloc.row, 1)
        self._gpu_rows_add(entry.pod, alloc.row, 1)

    def _drop(self, uid: str) -> None:
        entry = self.pods.pop(uid)
        self._assumed.pop(uid, None)
        node = entry.node
        members = self._by_node.get(node)
        if members is not None:
            members.discard(uid)
            if not members:
                del self._by_node[node]
        self._ports_add(entry.pod, node, -1)
        self._file(entry.pod, -1)
        self._uncharge(entry)
        self._usage_unset(uid)

    def _uncharge(self, entry: PodEntry) -> None:
        """Give back exactly what `entry` was charged (its pod's request as charged). The
        entry keeps its `alloc`: a dropped entry's callers read where it was."""
        if entry.alloc is not None:
            a = entry.alloc
            req = entry.pod.request
            self.snapshot.apply(
                a.row, req.cpu_milli, req.memory_bytes, a.cards, a.milli, a.mem_mib, -1, req.other
            )
            self._job_add(entry.pod, a.row, -1)
            self._gpu_rows_add(entry.pod, a.row, -1)

    def _ports_add(self, pod: PodInfo, node: str, delta: int) -> None:
        if not pod.host_ports:
            return
        used = self._ports.setdefault(node, {})
        for hp in pod.host_ports:
            key = (hp.protocol, hp.port)
            ips = used.setdefault(key, Counter())
            ips[hp.ip] += delta
            if ips[hp.ip] <= 0:
                del ips[hp.ip]
                if not ips:
                    del used[key]
        if not used:
            del self._ports[node]

    def _file(self, pod: PodInfo, delta: int) -> None:
        """File (delta 1) or unfile (-1) a pod in the affinity and label indexes."""
        anti = pod.affinity.get("podAntiAffinity") if pod.affinity else None
        if anti or (pod.affinity and pod.affinity.get("podAffinity")):
            if delta > 0:
                self._with_affinity[pod.uid] = None
            else:
                self._with_affinity.pop(pod.uid, None)
            if isinstance(anti, Mapping) and anti.get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            ):
                if delta > 0:
                    self._with_required_anti[pod.uid] = None
                else:
                    self._with_required_anti.pop(pod.uid, None)
        if self._labels is not None:
            self._labels.add(pod, delta)

    def _job_add(self, pod: PodInfo, row: int, delta: int) -> None:
        key = pod.job_key
        if not key:
            return
        counts = self._jobs.setdefault(key, Counter())
        counts[row] += delta
        if counts[row] <= 0:
            del counts[row]
            if not counts:
                del self._jobs[key]

    def _allocation_of(self, entry: PodEntry, row: int) -> tuple[Allocation, bool]:
        """The cards a bound pod holds (module docstring): its assignment when valid and
        unchanged, inferred by best fit without one, else every card it could hold, whole."""
        snap = self.snapshot
        pod = entry.pod
        req = pod.request
        node = snap.names[row]
        n_cards = int(snap.node_card_count[row])
        claim = entry.claim if entry.claim is not None else Claim.of(pod)
        problem = entry.suspect or _invalid(req, claim, n_cards, snap.card_total_mem[row])
        if problem:
            entry.suspect = problem
            return self._conservative(entry, row, claim, n_cards)
        if req.kind is GpuKind.NONE:
            return Allocation(node, row), False
        inferred = not isinstance(claim.ids, tuple)
        ids = list(claim.ids) if isinstance(claim.ids, tuple) else self._infer(entry, row, n_cards)
        milli: list[int] = []
        mem: list[int] = []
        for c in ids:
            m, mm = share_on_card(req, int(snap.card_total_mem[row, c]))
            if isinstance(claim.milli, int):
                m = claim.milli  # validated: at least the share, at most a card
            milli.append(max(0, min(m, FULL_CARD_MILLI)))
            mem.append(max(0, mm))
        entry.held = _union(entry.held, ids)
        return Allocation(node, row, tuple(ids), tuple(milli), tuple(mem)), inferred

    def _conservative(
        self, entry: PodEntry, row: int, claim: Claim, n_cards: int
    ) -> tuple[Allocation, bool]:
        """Every card the pod could hold, each charged whole (module docstring)."""
        snap = self.snapshot
        named = claim.ids if isinstance(claim.ids, tuple) else ()
        cards = [c for c in _union(entry.held, named) if c < n_cards]
        req = entry.pod.request
        want = min(n_cards, req.gpu_cards or (1 if req.kind is GpuKind.SHARED else 0))
        inferred = len(cards) < want
        if inferred:
            cards += self._infer(entry, row, n_cards, want - len(cards), exclude=cards)
        entry.held = _union(entry.held, cards)
        alloc = Allocation(
            snap.names[row],
            row,
            tuple(cards),
            (FULL_CARD_MILLI,) * len(cards),
            tuple(max(0, int(snap.card_total_mem[row, c])) for c in cards),
        )
        return alloc, inferred

    def _infer(
        self,
        entry: PodEntry,
        row: int,
        n_cards: int,
        count: int = 0,
        exclude: list[int] | None = None,
    ) -> list[int]:
        """The cards a pod without a usable assignment holds: those it was inferred on
        before, else best fit (intact, freest cards for whole cards; the fullest card the
        share fits for a shared pod), as a device plugin handing out free cards does."""
        req = entry.pod.request
        count = count or req.gpu_cards or 1
        taken = set(exclude or ())
        before = [c for c in entry.held if c < n_cards and c not in taken]
        if len(before) >= count:
            return before[:count]
        free = self.snapshot.card_free_milli[row, :n_cards]
        pool = [c for c in range(n_cards) if c not in taken]
        if req.gpu_cards or count > 1:
            # Intact cards first, then the freest, lowest index on ties.
            return sorted(pool, key=lambda c: (-int(free[c]), c))[:count]
        need = max(1, req.gpu_milli)
        fitting = [c for c in pool if free[c] >= need]
        pool = fitting or pool
        # No card on the node (unknown to the cache): the pod holds none here.
        if not pool:
            return []
        return [min(pool, key=lambda c: (int(free[c]) - need if c in fitting else 10**6, c))]


def _ignore(pod: PodInfo, message: str) -> None:
    """The default pod_warning: the message is kept in CacheStats.warnings only."""


def _ignore_namespace(namespace: str) -> None:
    """The default usage_changed: nobody publishes quota usage."""


def _union(a: Iterable[int], b: Iterable[int]) -> tuple[int, ...]:
    """`a` then the members of `b` not in it, in order."""
    out = list(a)
    out.extend(c for c in b if c not in out)
    return tuple(out)


def _invalid(req: PodRequest, claim: Claim, n_cards: int, card_mem: np.ndarray) -> str:
    """Why `claim` is not what the scheduler writes for `req` on a node of `n_cards` cards;
    "" when it is (module docstring)."""
    ids, milli = claim.ids, claim.milli
    if req.kind is GpuKind.NONE:
        if ids is None and milli is None:
            return ""
        return f"a pod without a GPU request carries a GPU assignment ({claim.describe()})"
    if isinstance(ids, str):
        try:
            parse_gpu_ids(ids)
            why = "does not parse"  # pragma: no cover - Claim.of keeps parsed ids as a tuple
        except ValueError as exc:
            why = str(exc)
        return f"{keys.GPU_IDS}={ids!r} is invalid: {why}"
    if ids is None:
        if milli is None:
            return ""  # another scheduler's pod: inferred
        return f"{keys.GPU_MILLI_ASSIGNED}={str(milli)!r} without {keys.GPU_IDS}"
    text = ",".join(map(str, ids))
    missing = [c for c in ids if c >= n_cards]
    if missing:
        return (
            f"{keys.GPU_IDS}={text!r} names card(s) {','.join(map(str, missing))} but the node"
            f" has {n_cards} card(s)"
        )
    if req.gpu_cards:
        if len(ids) != req.gpu_cards:
            return (
                f"{keys.GPU_IDS}={text!r} names {len(ids)} card(s) for a pod requesting"
                f" {req.gpu_cards} {keys.GPU_RESOURCE}"
            )
        if milli is not None:
            return (
                f"{keys.GPU_MILLI_ASSIGNED}={str(milli)!r} on a whole-card pod (the scheduler"
                " writes it only for a share of a card)"
            )
        return ""
    if len(ids) != 1:
        return f"{keys.GPU_IDS}={text!r} names {len(ids)} cards for a pod sharing one card"
    if milli is None:
        return ""
    if isinstance(milli, str):
        return f"{keys.GPU_MILLI_ASSIGNED}={milli!r} is not a number of milli-GPU"
    share, _ = share_on_card(req, int(card_mem[ids[0]]))
    need = max(1, share, req.gpu_milli)
    if not need <= milli <= FULL_CARD_MILLI:
        return (
            f"{keys.GPU_MILLI_ASSIGNED}={str(milli)!r} is outside {need}-{FULL_CARD_MILLI}"
            " (the pod's share of the card to a whole card)"
        )
    return ""


class _LabelIndex:
    """Pod uids by namespace, by label key and by (key, value): which pods a PodMatcher
    may match, so counting reads those pods only."""

    __slots__ = ("by_key", "by_ns", "by_pair")

    def __init__(self) -> None:
        self.by_ns: dict[str, set[str]] = {}
        self.by_key: dict[str, set[str]] = {}
        self.by_pair: dict[tuple[str, str], set[str]] = {}

    def add(self, pod: PodInfo, delta: int) -> None:
        uid = pod.uid
        slots: list[tuple[dict[Any, set[str]], Any]] = [(self.by_ns, pod.namespace)]
        for k, v in pod.labels.items():
            slots.append((self.by_key, k))
            slots.append((self.by_pair, (k, v)))
        for table, key in slots:
            if delta > 0:
                table.setdefault(key, set()).add(uid)
                continue
            members = table.get(key)
            if members is not None:
                members.discard(uid)
                if not members:
                    del table[key]

    def candidates(self, matcher: PodMatcher) -> list[str]:
        """A superset of the uids `matcher` matches: the smaller of the pods in its
        namespaces and the pods filed under its anchor (every pod when it has neither). A
        list, not a view: the sets must not change under the caller's loop."""
        choices: list[list[set[str]]] = []
        namespaces = matcher.namespaces
        if namespaces is not None:
            choices.append([got for ns in namespaces if (got := self.by_ns.get(ns))])
        anchor = matcher.anchor
        if anchor is not None:
            key, values = anchor
            if values is None:
                got = self.by_key.get(key)
                choices.append([got] if got else [])
            else:
                choices.append([got for v in values if (got := self.by_pair.get((key, v)))])
        if not choices:
            choices.append(list(self.by_ns.values()))
        best = min(choices, key=lambda sets: sum(len(x) for x in sets))
        return [uid for members in best for uid in members]

"""InterPodAffinity (PreFilter, Filter, PreScore, Score, NormalizeScore).

kube-scheduler's plugin over the whole snapshot at once. Counting is per topology domain: a
row's domain for a key is its node's value of that label (plugins/helper/label_index),
the cache counts the pods a selector matches per row (`Handle.count_matching_pods`, never a
walk over every pod), the `domain_counts` kernel sums them per domain and `domain_gather`
reads each row's domain back. Other pods' terms are read only from the pods that carry
any (`Handle.pods_with_affinity`).

Filter, in upstream's order (a row's reason is the first check it fails):
1. the incoming pod's required affinity: every term's key on the node and, in the node's
   domain, a pod matching *all* the terms; or, when no pod anywhere matches them and the pod
   matches its own terms, any node with every key (the first pod of a group).
   "node(s) didn't match pod affinity rules", UnschedulableAndUnresolvable.
2. its required anti-affinity: no pod matching a term in the node's domain of that term's
   key (a node without the key passes). "node(s) didn't match pod anti-affinity rules",
   Unschedulable.
3. existing pods' required anti-affinity that matches the incoming pod: not in the domain of
   such a pod's node. "node(s) didn't satisfy existing pods anti-affinity rules",
   Unschedulable.

PreFilter computes all three over every row; Filter only masks the candidates. It skips
(no Filter) when the pod has no required terms and no existing pod has required
anti-affinity, so a cluster without pod affinity pays a dictionary lookup per pod.

Score: per (key, value) domain, + weight for each existing pod the incoming pod's preferred
affinity terms match there, - weight for its preferred anti-affinity terms; + the
hardPodAffinityWeight for each existing pod whose required affinity the incoming pod
matches, +/- weight for each existing pod whose preferred (anti-)affinity it matches. A
row's raw score is the sum over the keys of its domains' totals; NormalizeScore maps the
scored rows min-max to 0..100. PreScore skips when nothing contributes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState, StateKey
from gpusched.framework.interfaces import (
    MAX_NODE_SCORE,
    FilterResult,
    Handle,
    Mask,
    PodMatcher,
    PreFilterResult,
    Rows,
    Scores,
    ScoreUnit,
)
from gpusched.framework.status import SUCCESS, Code, Status
from gpusched.kernels import (
    domain_counts_nb,
    domain_counts_np,
    domain_gather_nb,
    domain_gather_np,
)
from gpusched.kernels.dispatch import pick
from gpusched.model.pod import PodInfo
from gpusched.model.selector import freeze
from gpusched.plugins.helper.args import checked_args
from gpusched.plugins.helper.label_index import LabelIndex, synced_index
from gpusched.plugins.helper.pod_selector import PodSelector
from gpusched.plugins.inter_pod_affinity.args import InterPodAffinityArgs
from gpusched.plugins.inter_pod_affinity.terms import (
    NONE,
    AffinityTerm,
    PodTerms,
    has_pod_affinity,
    parse_pod_terms,
)

REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
REASONS = (REASON_AFFINITY, REASON_ANTI_AFFINITY, REASON_EXISTING_ANTI_AFFINITY)

_CACHE_LIMIT = 4096  # compiled term sets kept; replicas of a workload share one
_EXISTING_LIMIT = 65536  # existing pods whose terms are remembered by uid

domain_counts = pick(domain_counts_nb, domain_counts_np)
domain_gather = pick(domain_gather_nb, domain_gather_np)

I64 = NDArray[np.int64]


def _add_rows(table: dict[str, I64], key: str, rows: Rows, weight: int, n: int) -> None:
    """Add `weight` at each of `rows` (repeats add up) to the per-row column of `key`."""
    col = table.get(key)
    if col is None:
        col = table[key] = np.zeros(n, np.int64)
    np.add.at(col, rows, weight)


class _AllOf:
    """A PodMatcher for the pods matching every one of `terms` (upstream counts, for
    required affinity, the pods that satisfy all the terms at once)."""

    __slots__ = ("anchor", "namespaces", "terms")

    def __init__(self, terms: Sequence[PodSelector]) -> None:
        self.terms = tuple(terms)
        ns: frozenset[str] | None = None
        for t in terms:
            if t.namespaces is not None:
                ns = t.namespaces if ns is None else ns & t.namespaces
        self.namespaces = ns
        anchor: tuple[str, frozenset[str] | None] | None = None
        for t in terms:
            anchor = t.anchor
            if anchor is not None:
                break
        self.anchor = anchor

    def matches(self, pod: PodInfo) -> bool:
        return all(t.matches(pod) for t in self.terms)


@dataclass(frozen=True, slots=True)
class _FilterState:
    blocked: Mask  # per row: fails one of the three checks
    codes: NDArray[np.int8]  # per row: index into REASONS of the first failed check
    unresolvable: Mask  # rows failing the affinity check


# Built once: a frozen Status costs microseconds to make, and most pods skip both points.
_SKIP = Status(Code.SKIP, (), "InterPodAffinity")

_FILTER: StateKey[_FilterState] = StateKey("InterPodAffinity/filter")
_SCORE: StateKey[I64] = StateKey("InterPodAffinity/score")


class InterPodAffinity:
    name: ClassVar[str] = "InterPodAffinity"
    score_unit: ClassVar[ScoreUnit] = ScoreUnit(
        "term weight (sum)",
        (
            "sum of the weights of the preferred (anti-)affinity terms matched by pods in the "
            "node's domains (anti-affinity negative); min-max normalised"
        ),
    )
    Args: ClassVar[type[InterPodAffinityArgs]] = InterPodAffinityArgs

    def __init__(self, args: InterPodAffinityArgs | None, handle: Handle) -> None:
        self.args = checked_args(args, InterPodAffinityArgs)
        self.handle = handle
        self._index: LabelIndex | None = None
        self._terms_cache: dict[Any, PodTerms] = {}
        # Existing pods' terms by uid, with the PodInfo they were read from: a cycle reads
        # every pod with terms, and a pod's version changes only when the watch says so.
        self._existing: dict[str, tuple[PodInfo, PodTerms]] = {}

    # -- shared ----------------------------------------------------------------------------

    def terms(self, pod: PodInfo) -> PodTerms:
        """The pod's compiled terms, cached by what they depend on."""
        if not has_pod_affinity(pod):
            return NONE
        aff = pod.affinity
        sig = (
            pod.namespace,
            freeze((aff.get("podAffinity"), aff.get("podAntiAffinity"))),
            frozenset(pod.labels.items()),  # matchLabelKeys read the owner's labels
        )
        got = self._terms_cache.get(sig)
        if got is None:
            got = parse_pod_terms(pod)
            if len(self._terms_cache) >= _CACHE_LIMIT:
                self._terms_cache.clear()
            self._terms_cache[sig] = got
        return got

    def existing_terms(self, pod: PodInfo) -> PodTerms:
        """`terms`, remembered per uid and PodInfo version: pods in the cache, and the
        incoming pod across its PreFilter and PreScore."""
        got = self._existing.get(pod.uid)
        if got is not None and got[0] is pod:
            return got[1]
        terms = self.terms(pod)
        if len(self._existing) >= _EXISTING_LIMIT:
            # Deleted pods' entries are never removed one by one: start afresh.
            self._existing.clear()
        self._existing[pod.uid] = (pod, terms)
        return terms

    def _groups(self, pods: Sequence[tuple[PodInfo, int]]) -> list[tuple[PodTerms, Rows]]:
        """The pods with terms, grouped by their compiled terms (replicas share one), with
        the rows holding each group's pods (a row once per pod): a group's terms are
        checked against the incoming pod once, not once per replica."""
        groups: dict[int, tuple[PodTerms, list[int]]] = {}
        for other, row in pods:
            terms = self.existing_terms(other)
            got = groups.get(id(terms))
            if got is None:
                groups[id(terms)] = (terms, [row])
            else:
                got[1].append(row)
        return [(t, np.array(rows, np.intp)) for t, rows in groups.values()]

    def _rows_by_domain(self, keys: Sequence[str]) -> dict[str, tuple[NDArray[np.int32], int]]:
        """Each key's domain id per row and domain count. Every key is declared watched
        before any is read: declaring a new one may renumber the label sets."""
        snap = self.handle.snapshot
        snap.watch_labels(keys)
        index = self._index = synced_index(self._index, snap)
        out: dict[str, tuple[NDArray[np.int32], int]] = {}
        for key in keys:
            rows, values = index.rows(key)
            out[key] = (rows, len(values))
        return out

    def _domain_totals(self, domains: NDArray[np.int32], n: int, per_row: I64) -> I64:
        out = np.zeros(n, np.int64)
        domain_counts(domains, per_row, np.ones(len(domains), np.bool_), out)
        return out

    def _per_row(self, domains: NDArray[np.int32], per_domain: I64) -> I64:
        out = np.zeros(len(domains), np.int64)
        domain_gather(domains, per_domain, out)
        return out

    def _count(self, matcher: PodMatcher) -> I64:
        return self.handle.count_matching_pods(matcher)

    # -- PreFilter / Filter ----------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        terms = self.existing_terms(pod)
        if terms.errors:
            # The API server refuses such pods; this one bypassed validation. Upstream:
            # "parsing pod: ...", UnschedulableAndUnresolvable.
            message = "parsing pod: " + "; ".join(terms.errors)
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (message,), self.name)
        computed = self._filter_state(pod, terms)
        if computed is None:
            return None, _SKIP
        state.write(_FILTER, computed)
        return None, SUCCESS

    def _filter_state(self, pod: PodInfo, terms: PodTerms) -> _FilterState | None:
        handle = self.handle
        existing = handle.pods_with_affinity(required_anti_only=True)
        if not existing and not terms.required_affinity and not terms.required_anti:
            return None  # the common case, first: nothing to enforce
        namespaces = handle.namespace_labels()
        own_ns = namespaces.get(pod.namespace, {})
        n = len(handle.snapshot.node_valid)
        # Existing pods' required anti-affinity terms the incoming pod matches: per key,
        # how many such pods each row holds.
        hits: dict[str, I64] = {}
        for other, rows in self._groups(existing):
            for t in other.required_anti:
                if t.matches(pod, own_ns):
                    _add_rows(hits, t.topology_key, rows, 1, n)
        if not hits and not terms.required_affinity and not terms.required_anti:
            return None
        keys = list(
            dict.fromkeys(
                [*hits, *(t.topology_key for t in terms.required_affinity + terms.required_anti)]
            )
        )
        domains = self._rows_by_domain(keys)
        blocked = np.zeros(n, np.bool_)
        codes = np.zeros(n, np.int8)
        unresolvable = np.zeros(n, np.bool_)
        if terms.required_affinity:
            unresolvable = self._affinity_fails(pod, terms.required_affinity, namespaces, domains)
            blocked |= unresolvable
        if terms.required_anti:
            hit = np.zeros(n, np.bool_)
            for t in terms.required_anti:
                dom, n_dom = domains[t.topology_key]
                counts = self._count(t.resolved(namespaces))
                hit |= self._per_row(dom, self._domain_totals(dom, n_dom, counts)) > 0
            codes[hit & ~blocked] = 1
            blocked |= hit
        if hits:
            got = np.zeros(n, np.int64)
            for key, per_row in hits.items():
                dom, n_dom = domains[key]
                domain_gather(dom, self._domain_totals(dom, n_dom, per_row), got)
            hit = got > 0
            codes[hit & ~blocked] = 2
            blocked |= hit
        return _FilterState(blocked, codes, unresolvable)

    def _affinity_fails(
        self,
        pod: PodInfo,
        required: tuple[AffinityTerm, ...],
        namespaces: Mapping[str, Mapping[str, str]],
        domains: Mapping[str, tuple[NDArray[np.int32], int]],
    ) -> Mask:
        resolved = [t.resolved(namespaces) for t in required]
        counts = self._count(_AllOf(resolved))
        n = len(counts)
        missing_key = np.zeros(n, np.bool_)
        pods_exist = np.ones(n, np.bool_)
        any_match = False
        for t in required:
            dom, n_dom = domains[t.topology_key]
            per_domain = self._domain_totals(dom, n_dom, counts)
            any_match = any_match or bool(per_domain.any())
            missing_key |= dom < 0
            pods_exist &= self._per_row(dom, per_domain) > 0
        if not any_match and all(s.matches(pod) for s in resolved):
            # The first pod of a group with affinity to itself: no pod anywhere matches
            # the terms, the pod matches them, so any node with every key will do.
            return missing_key
        return missing_key | ~pods_exist

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        fs = state.get(_FILTER)
        if fs is None:  # PreFilter not in the profile
            terms = self.terms(pod)
            if terms.errors:
                return FilterResult(
                    np.zeros(len(candidates), np.bool_), (REASON_AFFINITY,), unresolvable=True
                )
            fs = self._filter_state(pod, terms)
            if fs is None:
                return FilterResult(candidates)
        rejected = candidates & fs.blocked
        if not rejected.any():
            return FilterResult(candidates)
        return FilterResult(candidates & ~fs.blocked, REASONS, fs.codes, fs.unresolvable)

    # -- PreScore / Score ------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Status:
        if len(rows) == 0:
            return _SKIP
        terms = self.existing_terms(pod)
        if terms.errors:
            message = "parsing pod: " + "; ".join(terms.errors)
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (message,), self.name)
        has_preferred = bool(terms.preferred_affinity or terms.preferred_anti)
        if self.args.ignore_preferred_terms_of_existing_pods and not has_preferred:
            return _SKIP
        scores = self._scores(pod, terms)
        if scores is None:
            return _SKIP
        state.write(_SCORE, scores)
        return SUCCESS

    def _scores(self, pod: PodInfo, terms: PodTerms) -> I64 | None:
        handle = self.handle
        existing = handle.pods_with_affinity()
        if not existing and not terms.preferred_affinity and not terms.preferred_anti:
            return None  # the common case, first: nothing scores
        namespaces = handle.namespace_labels()
        own_ns = namespaces.get(pod.namespace, {})
        hard = self.args.hard_pod_affinity_weight
        n = len(handle.snapshot.node_valid)
        # Existing pods' terms the incoming pod matches: per key, the summed weight of the
        # matching terms of the pods on each row (a term entry even when the sum is 0).
        hits: dict[str, I64] = {}
        for ot, rows in self._groups(existing):
            if hard > 0:
                for t in ot.required_affinity:
                    if t.matches(pod, own_ns):
                        _add_rows(hits, t.topology_key, rows, hard, n)
            for w in ot.preferred_affinity:
                if w.term.matches(pod, own_ns):
                    _add_rows(hits, w.term.topology_key, rows, w.weight, n)
            for w in ot.preferred_anti:
                if w.term.matches(pod, own_ns):
                    _add_rows(hits, w.term.topology_key, rows, -w.weight, n)
        own = [(w.term, w.weight) for w in terms.preferred_affinity] + [
            (w.term, -w.weight) for w in terms.preferred_anti
        ]
        if not hits and not own:
            return None
        for term, weight in own:
            # The incoming pod's preferred terms: the pods each selects, per row, weighted.
            counts = self._count(term.resolved(namespaces))
            got = hits.get(term.topology_key)
            if got is None:
                hits[term.topology_key] = weight * counts
            else:
                got += weight * counts
        domains = self._rows_by_domain(list(hits))
        out = np.zeros(n, np.int64)
        # Upstream skips when no (key, value) pair got a score entry; a pair whose entries
        # cancel out scores 0 for every node either way.
        touched = False
        for key, per_row in hits.items():
            dom, n_dom = domains[key]
            per_domain = self._domain_totals(dom, n_dom, per_row)
            if per_domain.any():
                touched = True
                domain_gather(dom, per_domain, out)
        return out if touched else None

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        got = state.get(_SCORE)
        if got is None:  # PreScore not in the profile
            terms = self.terms(pod)
            got = None if terms.errors else self._scores(pod, terms)
            if got is None:
                return np.zeros(len(rows), np.float64)
        return got[rows].astype(np.float64)

    def normalize(self, state: CycleState, pod: PodInfo, scores: Scores) -> None:
        """Min-max to 0..100 in upstream's float arithmetic, truncated to integers."""
        if len(scores) == 0:
            return
        raw = scores.astype(np.int64)
        lo, hi = int(raw.min()), int(raw.max())
        if hi - lo <= 0:
            scores[:] = 0.0
            return
        scores[:] = np.trunc(MAX_NODE_SCORE * ((raw - lo).astype(np.float64) / float(hi - lo)))

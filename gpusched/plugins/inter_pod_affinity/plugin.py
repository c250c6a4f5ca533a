"""InterPodAffinity (PreFilter, Filter, PreScore, Score, NormalizeScore).

kube-scheduler's plugin over the whole snapshot at once. Counting is per topology domain: a
row's domain for a key is its node's value of that label (plugins/helper/topology_domains),
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
)
from gpusched.framework.status import SUCCESS, Code, Status, skip
from gpusched.kernels import (
    domain_counts_nb,
    domain_counts_np,
    domain_gather_nb,
    domain_gather_np,
)
from gpusched.kernels.dispatch import pick
from gpusched.model.pod import PodInfo
from gpusched.plugins.helper.pod_selector import PodSelector
from gpusched.plugins.helper.topology_domains import TopologyDomains
from gpusched.plugins.inter_pod_affinity.args import InterPodAffinityArgs
from gpusched.plugins.inter_pod_affinity.terms import (
    NONE,
    AffinityTerm,
    PodTerms,
    freeze,
    has_pod_affinity,
    parse_pod_terms,
)

REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
REASONS = (REASON_AFFINITY, REASON_ANTI_AFFINITY, REASON_EXISTING_ANTI_AFFINITY)

_CACHE_LIMIT = 4096  # compiled term sets kept; replicas of a workload share one

domain_counts = pick(domain_counts_nb, domain_counts_np)
domain_gather = pick(domain_gather_nb, domain_gather_np)

I64 = NDArray[np.int64]


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


_FILTER: StateKey[_FilterState] = StateKey("InterPodAffinity/filter")
_SCORE: StateKey[I64] = StateKey("InterPodAffinity/score")


class InterPodAffinity:
    name: ClassVar[str] = "InterPodAffinity"
    Args: ClassVar[type[InterPodAffinityArgs]] = InterPodAffinityArgs

    def __init__(self, args: InterPodAffinityArgs | None, handle: Handle) -> None:
        self.args = args if args is not None else InterPodAffinityArgs()
        problems = self.args.validate()
        if problems:
            # Configuration is validated before plugins are built; this guards direct use.
            raise ValueError("; ".join(f"{f}: {m}" for f, m in problems))
        self.handle = handle
        self._domains = TopologyDomains()
        self._terms_cache: dict[Any, PodTerms] = {}

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

    def _rows_by_domain(self, keys: Sequence[str]) -> dict[str, tuple[NDArray[np.int32], int]]:
        """Each key's domain id per row and domain count. Every key is declared watched
        before any is read: declaring a new one may renumber the label sets."""
        snap = self.handle.snapshot
        snap.watch_labels(keys)
        out: dict[str, tuple[NDArray[np.int32], int]] = {}
        for key in keys:
            rows, values = self._domains.rows(snap, key)
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
        terms = self.terms(pod)
        if terms.errors:
            # The API server refuses such pods; this one bypassed validation. Upstream:
            # "parsing pod: ...", UnschedulableAndUnresolvable.
            message = "parsing pod: " + "; ".join(terms.errors)
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (message,), self.name)
        computed = self._filter_state(pod, terms)
        if computed is None:
            return None, skip(self.name)
        state.write(_FILTER, computed)
        return None, SUCCESS

    def _filter_state(self, pod: PodInfo, terms: PodTerms) -> _FilterState | None:
        handle = self.handle
        namespaces = handle.namespace_labels()
        own_ns = namespaces.get(pod.namespace, {})
        # Existing pods' required anti-affinity terms the incoming pod matches: (key, row).
        hits: list[tuple[str, int]] = []
        for other, row in handle.pods_with_affinity(required_anti_only=True):
            for t in self.terms(other).required_anti:
                if t.matches(pod, own_ns):
                    hits.append((t.topology_key, row))
        if not hits and not terms.required_affinity and not terms.required_anti:
            return None
        keys = list(
            dict.fromkeys(
                [k for k, _ in hits]
                + [t.topology_key for t in terms.required_affinity + terms.required_anti]
            )
        )
        domains = self._rows_by_domain(keys)
        n = len(handle.snapshot.node_valid)
        blocked = np.zeros(n, np.bool_)
        codes = np.zeros(n, np.int8)
        unresolvable = np.zeros(n, np.bool_)
        if terms.required_affinity:
            unresolvable = self._affinity_fails(pod, terms.required_affinity, namespaces, domains)
            blocked |= unresolvable
        if terms.required_anti:
            hit = np.zeros(n, np.bool_)
            for t in terms.required_anti:
                rows, n_dom = domains[t.topology_key]
                counts = self._count(t.resolved(namespaces))
                hit |= self._per_row(rows, self._domain_totals(rows, n_dom, counts)) > 0
            codes[hit & ~blocked] = 1
            blocked |= hit
        if hits:
            per_key = {k: np.zeros(domains[k][1], np.int64) for k, _ in hits}
            for key, row in hits:
                d = domains[key][0][row]
                if d >= 0:
                    per_key[key][d] += 1
            got = np.zeros(n, np.int64)
            for key, per_domain in per_key.items():
                domain_gather(domains[key][0], per_domain, got)
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
            rows, n_dom = domains[t.topology_key]
            per_domain = self._domain_totals(rows, n_dom, counts)
            any_match = any_match or bool(per_domain.any())
            missing_key |= rows < 0
            pods_exist &= self._per_row(rows, per_domain) > 0
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
            return skip(self.name)
        terms = self.terms(pod)
        if terms.errors:
            message = "parsing pod: " + "; ".join(terms.errors)
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (message,), self.name)
        has_preferred = bool(terms.preferred_affinity or terms.preferred_anti)
        if self.args.ignore_preferred_terms_of_existing_pods and not has_preferred:
            return skip(self.name)
        scores = self._scores(pod, terms)
        if scores is None:
            return skip(self.name)
        state.write(_SCORE, scores)
        return SUCCESS

    def _scores(self, pod: PodInfo, terms: PodTerms) -> I64 | None:
        handle = self.handle
        namespaces = handle.namespace_labels()
        own_ns = namespaces.get(pod.namespace, {})
        hard = self.args.hard_pod_affinity_weight
        # Existing pods' terms the incoming pod matches: (key, row of that pod, weight).
        hits: list[tuple[str, int, int]] = []
        for other, row in handle.pods_with_affinity():
            ot = self.terms(other)
            if ot.empty:
                continue
            if hard > 0:
                hits.extend(
                    (t.topology_key, row, hard)
                    for t in ot.required_affinity
                    if t.matches(pod, own_ns)
                )
            hits.extend(
                (w.term.topology_key, row, w.weight)
                for w in ot.preferred_affinity
                if w.term.matches(pod, own_ns)
            )
            hits.extend(
                (w.term.topology_key, row, -w.weight)
                for w in ot.preferred_anti
                if w.term.matches(pod, own_ns)
            )
        own = [(w.term, w.weight) for w in terms.preferred_affinity] + [
            (w.term, -w.weight) for w in terms.preferred_anti
        ]
        if not hits and not own:
            return None
        keys = list(dict.fromkeys([k for k, _, _ in hits] + [t.topology_key for t, _ in own]))
        domains = self._rows_by_domain(keys)
        per_key = {k: np.zeros(n_dom, np.int64) for k, (_, n_dom) in domains.items()}
        # Whether any (key, value) pair got an entry: upstream skips an empty score map.
        touched = False
        for term, weight in own:
            rows, n_dom = domains[term.topology_key]
            per_domain = self._domain_totals(rows, n_dom, self._count(term.resolved(namespaces)))
            if per_domain.any():
                touched = True
                per_key[term.topology_key] += weight * per_domain
        for key, row, weight in hits:
            d = domains[key][0][row]
            if d >= 0:
                touched = True
                per_key[key][d] += weight
        if not touched:
            return None
        out = np.zeros(len(handle.snapshot.node_valid), np.int64)
        for key, per_domain in per_key.items():
            domain_gather(domains[key][0], per_domain, out)
        return out

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

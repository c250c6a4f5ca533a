"""The daemon's DisruptionPort (framework/disruption.py): PodDisruptionBudgets and the
writes a preemption makes. The only module that reads PodDisruptionBudgets.

* A watch of `policy/v1` PodDisruptionBudgets keeps each one, decoded once
  (`budget_from_k8s`), per namespace. `budgets_of(pod)` returns the budgets of the pod's
  namespace whose selector matches the pod, with policy/v1's semantics (those of the
  eviction API and of the disruption controller that computes the budget): an empty
  selector `{}` matches every pod of the namespace, an absent one none. kube-scheduler's
  preemption reads `{}` as matching nothing; a budget that protects every pod of its
  namespace from `kubectl drain` protects them from gpusched's preemption too.
* `disruptions_allowed` is the status the disruption controller (kube-controller-manager)
  writes, and 0 while that status is not computed for the budget's current spec
  (`status.observedGeneration` behind `metadata.generation`): a budget just created or
  changed protects its pods until the controller has counted them. A selector that does not
  parse (the API server validates selectors, so only an object written before a validation
  existed could carry one) matches every pod of its namespace and allows nothing.
* The count is lowered by this scheduler's own evictions the controller has not yet
  counted: an eviction deletes the pod directly (kube-scheduler's way, not the eviction
  API, which would record the pod in `status.disruptedPods` itself), so until the
  controller writes a newer status, the budget still shows the victim as healthy.
* `evict` writes exactly what kube-scheduler v1.36 writes when it preempts
  (pkg/scheduler/framework/preemption/executor.go): the victim's `DisruptionTarget`
  condition (status True, reason `PreemptionByScheduler`) by a strategic-merge patch of
  pods/status, then the deletion (default grace period), then a Normal `Preempted` Event on
  the victim, related to the preemptor, action `Preempting`, "Preempted by pod <uid> on
  node <node>". Unlike kube-scheduler, the patch and the deletion carry the victim's uid as
  a precondition: a pod re-created under the same name is not the one chosen. A victim
  already gone (404, or that name now holding another uid) is a success, as in
  kube-scheduler (and then there is no Event: nothing was preempted by us).
* `nominate` sets or clears (`""` -> null) `status.nominatedNodeName` by a strategic-merge
  patch of pods/status, what kube-scheduler's PatchPodStatus sends for that change.

Every write goes through the ClusterWriter (the binds' token bucket; the Event on the
reports' bucket) and is fenced by the leader Lease as Bind is: an instance that cannot be
sure it still leads writes nothing. No method raises: failures are Statuses.

RBAC: get/list/watch `poddisruptionbudgets` (policy), delete `pods`, patch `pods/status`
(manifests/rbac/gpusched.yaml).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp

from gpusched.framework.disruption import Budget
from gpusched.framework.status import Code, Status
from gpusched.kube.client import ApiError, Kube
from gpusched.kube.ops import pod_path
from gpusched.kube.watch import Backoff, EventType, Reflector
from gpusched.kube.writer import ClusterWriter, ObjectRef, write_failure
from gpusched.model.pod import PodInfo
from gpusched.model.selector import EVERYTHING, LabelSelector, parse_label_selector

log = logging.getLogger(__name__)

PDB_PATH = "/apis/policy/v1/poddisruptionbudgets"
DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"
PREEMPTED = "Preempted"
PREEMPTING = "Preempting"
# The disruption controller forgets a pod in status.disruptedPods after this long
# (DeletionTimeout) if it never saw it go; our own uncounted evictions expire alike.
PENDING_SECONDS = 120.0
STRATEGIC = "application/strategic-merge-patch+json"
_NET_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)

Fence = Callable[[], str | None]


def disruption_target_message(preemptor: PodInfo) -> str:
    """kube-scheduler's DisruptionTarget message for a pod preemptor."""
    return f"{preemptor.scheduler_name}: preempting to accommodate a higher priority pod"


def preempted_message(preemptor: PodInfo, node: str) -> str:
    """kube-scheduler's Preempted Event message (`Preempted by %s %v on node %v`)."""
    return f"Preempted by pod {preemptor.uid} on node {node}"


@dataclass(frozen=True, slots=True)
class PodDisruptionBudget:
    """One policy/v1 PodDisruptionBudget as preemption reads it."""

    uid: str
    namespace: str
    name: str
    resource_version: str
    selector: LabelSelector
    disruptions_allowed: int
    problem: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def budget_from_k8s(obj: Mapping[str, Any]) -> PodDisruptionBudget:
    """A PodDisruptionBudget object as preemption uses it; never raises: a selector that
    does not parse, or a status not computed for the current spec, allows no disruption
    and says why in `problem`."""
    meta = _dict(obj.get("metadata"))
    spec = _dict(obj.get("spec"))
    status = _dict(obj.get("status"))
    problems: list[str] = []
    errors: list[str] = []
    # Absent (nil) parses to NOTHING, `{}` to EVERYTHING: metav1.LabelSelectorAsSelector,
    # which the policy/v1 lister (GetPodPodDisruptionBudgets) uses as it is.
    selector = parse_label_selector(spec.get("selector"), "spec.selector", errors)
    if errors:
        problems.append(
            "its selector does not parse (" + "; ".join(errors) + "): it is taken to cover"
            " every pod of its namespace and to allow no disruption"
        )
        selector = EVERYTHING
    allowed = _int(status.get("disruptionsAllowed"))
    generation = _int(meta.get("generation")) or 0
    observed = _int(status.get("observedGeneration"))
    if observed is None or observed < generation:
        problems.append(
            f"the disruption controller has not computed its status for generation"
            f" {generation} yet (observedGeneration {observed if observed is not None else 0})"
        )
        allowed = 0
    elif allowed is None or allowed < 0:
        problems.append(
            f"status.disruptionsAllowed={status.get('disruptionsAllowed')!r} is not a count"
        )
        allowed = 0
    if problems:
        allowed = 0
    return PodDisruptionBudget(
        uid=str(meta.get("uid") or ""),
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        selector=selector,
        disruptions_allowed=allowed,
        problem="; ".join(problems),
    )


@dataclass(slots=True)
class _Pending:
    """An eviction of ours the budget's status may not count yet: until the budget's
    object changes after the deletion was sent (the controller rewrites its status when a
    covered pod starts terminating), or PENDING_SECONDS pass."""

    victim: str  # uid
    resource_version: str  # the budget's, when the victim was deleted
    at: float


@dataclass(slots=True)
class _Namespace:
    budgets: dict[str, PodDisruptionBudget] = field(default_factory=dict)  # name -> budget


def _matching(
    budgets: Iterable[PodDisruptionBudget],
    pending: Mapping[str, Sequence[_Pending]],
    now: float,
    pod: PodInfo,
) -> tuple[Budget, ...]:
    """The budgets whose selector matches the pod, each lowered by our evictions its
    status may not count yet (not the pod's own)."""
    out: list[Budget] = []
    for pdb in budgets:
        if not pdb.selector.matches(pod.labels):
            continue
        uncounted = sum(
            1
            for p in pending.get(pdb.key, ())
            if p.victim != pod.uid and now - p.at < PENDING_SECONDS
        )
        out.append(Budget(pdb.key, max(0, pdb.disruptions_allowed - uncounted), pdb.problem))
    return tuple(out)


class FrozenDisruption:
    """KubeDisruption's budgets copied at one instant (KubeDisruption.frozen), judged at
    that instant; it never changes and refuses every write."""

    def __init__(
        self,
        budgets: Mapping[str, tuple[PodDisruptionBudget, ...]],
        pending: Mapping[str, tuple[_Pending, ...]],
        now: float,
    ) -> None:
        self.budgets = dict(budgets)
        self.pending = dict(pending)
        self.now = now

    def budgets_of(self, pod: PodInfo) -> Sequence[Budget]:
        return _matching(self.budgets.get(pod.namespace, ()), self.pending, self.now, pod)

    async def evict(
        self, victim: PodInfo, *, preemptor: PodInfo, node: str, message: str
    ) -> Status:
        return Status(Code.ERROR, ("a frozen copy of the disruption view never writes",))

    async def nominate(self, pod: PodInfo, node: str) -> Status:
        return Status(Code.ERROR, ("a frozen copy of the disruption view never writes",))


class KubeDisruption:
    def __init__(
        self,
        kube: Kube,
        writer: ClusterWriter,
        *,
        fence: Fence = lambda: None,
        on_change: Callable[[], None] = lambda: None,
        backoff: Callable[[], Backoff] = Backoff,
        watch_timeout: int = 60,
        read_timeout: float = 90.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.writer = writer
        self.fence = fence
        self.on_change = on_change
        self.clock = clock
        self.namespaces: dict[str, _Namespace] = {}
        self.pending: dict[str, list[_Pending]] = {}  # budget key -> evictions not counted
        self.evicted = 0
        self.watch: Reflector[PodDisruptionBudget] = Reflector(
            kube,
            PDB_PATH,
            budget_from_k8s,
            self._on_budget,
            name="poddisruptionbudgets",
            watch_timeout=watch_timeout,
            read_timeout=read_timeout,
            backoff=backoff(),
        )

    @property
    def reflectors(self) -> tuple[Reflector[PodDisruptionBudget], ...]:
        return (self.watch,)

    async def wait_synced(self) -> None:
        await self.watch.synced.wait()

    async def run(self) -> None:
        await self.watch.run()

    # -- the watch ------------------------------------------------------------------------

    def _on_budget(self, kind: EventType, pdb: PodDisruptionBudget) -> None:
        ns = self.namespaces.setdefault(pdb.namespace, _Namespace())
        if kind is EventType.DELETED:
            old = ns.budgets.get(pdb.name)
            if old is not None and (not old.uid or not pdb.uid or old.uid == pdb.uid):
                del ns.budgets[pdb.name]
                self.pending.pop(pdb.key, None)
            if not ns.budgets:
                del self.namespaces[pdb.namespace]
        else:
            ns.budgets[pdb.name] = pdb
            pending = self.pending.get(pdb.key)
            if pending:
                # A newer status: the controller has seen the victims deleted before it.
                kept = [p for p in pending if p.resource_version == pdb.resource_version]
                if kept:
                    self.pending[pdb.key] = kept
                else:
                    del self.pending[pdb.key]
        self.on_change()

    # -- DisruptionPort reads -------------------------------------------------------------

    def budgets_of(self, pod: PodInfo) -> Sequence[Budget]:
        ns = self.namespaces.get(pod.namespace)
        if ns is None:
            return ()
        return _matching(ns.budgets.values(), self.pending, self.clock(), pod)

    def frozen(self) -> FrozenDisruption:
        """The budgets and our uncounted evictions as they are now, for a reader on another
        thread (`explain`): call it on the event loop, where the watch changes them."""
        return FrozenDisruption(
            {ns: tuple(n.budgets.values()) for ns, n in self.namespaces.items()},
            {key: tuple(p) for key, p in self.pending.items()},
            self.clock(),
        )

    # -- DisruptionPort writes ------------------------------------------------------------

    def _fenced(self, what: str, pod: PodInfo) -> Status | None:
        reason = self.fence()
        if reason is None:
            return None
        return Status(Code.ERROR, (f"not writing {what} of {pod.key}: {reason}",))

    async def evict(
        self, victim: PodInfo, *, preemptor: PodInfo, node: str, message: str
    ) -> Status:
        if (fenced := self._fenced("the preemption", victim)) is not None:
            return fenced
        path = pod_path(victim.namespace, victim.name)
        condition = {
            "type": DISRUPTION_TARGET,
            "status": "True",
            "reason": PREEMPTION_BY_SCHEDULER,
            "message": message or disruption_target_message(preemptor),
            "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        # metadata.uid in the patch is a precondition: the API server refuses to change a
        # pod's uid, so the patch fails on a pod re-created under the same name.
        patch = {"metadata": {"uid": victim.uid}, "status": {"conditions": [condition]}}
        try:
            await self.writer.write("PATCH", f"{path}/status", patch, STRATEGIC)
        except ApiError as exc:
            if _gone(exc):
                return self._already_gone(victim, preemptor)
            return write_failure("preempt (DisruptionTarget)", victim, exc)
        except _NET_ERRORS as exc:
            return write_failure("preempt (DisruptionTarget)", victim, exc)
        if (fenced := self._fenced("the preemption", victim)) is not None:
            return fenced
        # The budgets' versions and counts before the deletion. A status newer than these
        # that arrives before its answer was written while it was in flight: because of it
        # (the controller saw the victim terminating: fewer disruptions allowed), or for
        # another reason that still counts the victim healthy (a new pod matched, as a
        # preemptor just created does for a namespace-wide budget).
        versions = {
            b.key: (pdb.resource_version, pdb.disruptions_allowed)
            for b in self.budgets_of(victim)
            if (pdb := self._budget(b.key)) is not None
        }
        delete = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": victim.uid},
        }
        try:
            await self.writer.write("DELETE", path, delete)
        except ApiError as exc:
            if _gone(exc):
                return self._already_gone(victim, preemptor)
            return write_failure("preempt (delete)", victim, exc)
        except _NET_ERRORS as exc:
            return write_failure("preempt (delete)", victim, exc)
        self.evicted += 1
        now = self.clock()
        for key, (version, allowed_before) in versions.items():
            pdb = self._budget(key)
            if pdb is None:
                continue
            if pdb.resource_version != version and pdb.disruptions_allowed < allowed_before:
                continue  # the newer status counts the deletion already
            # Otherwise the victim is still counted healthy: subtract it until the status
            # changes again. Erring this way holds back a preemption at worst; the other
            # way would let one more pod go than the budget allows. Expired entries go here
            # too: a budget the controller never rewrites (not the first of its pods')
            # would otherwise keep them forever.
            kept = [p for p in self.pending.get(key, ()) if now - p.at < PENDING_SECONDS]
            self.pending[key] = [*kept, _Pending(victim.uid, pdb.resource_version, now)]
        log.info(
            "preempted %s (uid %s) for %s on node %s", victim.key, victim.uid, preemptor.key, node
        )
        await self.writer.event(
            ObjectRef.pod(victim),
            "Normal",
            PREEMPTED,
            preempted_message(preemptor, node),
            action=PREEMPTING,
            related=ObjectRef.pod(preemptor),
        )
        return Status()

    def _budget(self, key: str) -> PodDisruptionBudget | None:
        namespace, _, name = key.partition("/")
        ns = self.namespaces.get(namespace)
        return ns.budgets.get(name) if ns is not None else None

    def _already_gone(self, victim: PodInfo, preemptor: PodInfo) -> Status:
        log.info("preempting %s for %s: the victim is already gone", victim.key, preemptor.key)
        return Status()

    async def nominate(self, pod: PodInfo, node: str) -> Status:
        if (fenced := self._fenced("nominatedNodeName", pod)) is not None:
            return fenced
        patch = {"metadata": {"uid": pod.uid}, "status": {"nominatedNodeName": node or None}}
        try:
            await self.writer.write(
                "PATCH", pod_path(pod.namespace, pod.name) + "/status", patch, STRATEGIC
            )
        except ApiError as exc:
            if _gone(exc):
                exc = ApiError(exc.method, exc.path, 404, exc.body)
            return write_failure("nominate", pod, exc)
        except _NET_ERRORS as exc:
            return write_failure("nominate", pod, exc)
        return Status()


def _gone(exc: ApiError) -> bool:
    """The pod of that uid no longer exists: 404, or the name now holds another pod (the
    uid precondition failed: 409 on a delete, 422 `field is immutable` on a patch)."""
    if exc.status == 404:
        return True
    if exc.status == 409:
        return "precondition" in exc.message.lower() or "uid" in exc.message.lower()
    return exc.status == 422 and "metadata.uid" in exc.message

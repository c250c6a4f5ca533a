"""One small Protocol per extension point of the scheduling framework.

The shape follows kube-scheduler's pkg/scheduler/framework/interface.go with one deliberate
difference: Filter and Score work on the whole cluster at once. A Filter receives the
candidate rows as a boolean mask over the snapshot and returns the rows that pass; a Score
returns one number per feasible row. That lets a plugin run one numba kernel over the
snapshot's columns instead of being called once per node from Python.

Everything up to Permit is synchronous (the scheduling cycle never awaits); PreBind, Bind
and PostBind are coroutines that run in the binding cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState, StateKey
from gpusched.framework.disruption import DisruptionPort
from gpusched.framework.dra import DraPort
from gpusched.framework.gangs import GangPort
from gpusched.framework.snapshot import NodeColumns
from gpusched.framework.status import Status
from gpusched.framework.tenancy import TenancyPort
from gpusched.framework.volumes import VolumePort
from gpusched.model.pod import PodInfo
from gpusched.model.quota import Usage

MAX_NODE_SCORE = 100.0
MIN_NODE_SCORE = 0.0

Mask = NDArray[np.bool_]
Rows = NDArray[np.intp]
Scores = NDArray[np.float64]
UsedPorts = Mapping[tuple[str, int], Mapping[str, int]]
"""A node's host ports in use: (protocol, port) -> host IP -> how many pods hold it."""


@dataclass(slots=True)
class FilterResult:
    """Which candidate rows pass, and why the others do not.

    `feasible` may be the candidates array itself when every candidate passes: the runtime
    never writes into either, and skips the rejection count for it.
    `reasons[codes[row]]` explains a rejected row; without `codes` every rejected row gets
    `reasons[0]`. With `hits` (one row mask per reason) a rejected row counts under every
    reason that holds for it instead, as kube-scheduler counts a node whose Filter status
    has several reasons ("Insufficient cpu" and "Insufficient memory"). `unresolvable` rows
    cannot be fixed by preempting pods (a taint, a missing GPU model), the others maybe can
    (not enough free cards): True for every rejected row, or a mask of the rows it holds for.
    """

    feasible: Mask
    reasons: tuple[str, ...] = ()
    codes: NDArray[np.int8] | None = None
    unresolvable: bool | Mask = False
    hits: NDArray[np.bool_] | None = None


@dataclass(frozen=True, slots=True)
class PreFilterResult:
    """Rows the pod may go to at all (None = every row); PreFilter narrowing."""

    rows: Rows | None = None


@dataclass(frozen=True, slots=True)
class Allocation:
    """The cards a pod gets on its node, chosen at Reserve."""

    node: str
    row: int
    cards: tuple[int, ...] = ()
    milli: tuple[int, ...] = ()  # held per card
    mem_mib: tuple[int, ...] = ()  # held per card


ALLOCATION: StateKey[Allocation] = StateKey("gpusched/allocation")
"""Written by the GPU Reserve plugin: the cards the pod gets; the runtime assumes it."""


BINDING_ANNOTATIONS: StateKey[dict[str, str]] = StateKey("gpusched/binding-annotations")
"""Annotations the Binding object carries (PreBind plugins add to it, the Bind plugin sends
it): kube-apiserver copies them onto the pod in the same write as spec.nodeName, so the pod
is never seen bound without its card assignment and the scheduler needs no right to patch
pods (pkg/registry/core/pod/storage/storage.go, setPodNodeAndMetadata)."""


PODS_TO_ACTIVATE: StateKey[set[str]] = StateKey("gpusched/pods-to-activate")
"""Pod uids a plugin wants moved to activeQ after this attempt, out of the unschedulable set
or backoffQ (kube-scheduler's PodsToActivate): a gang member that starts placing its gang
pulls its siblings in, so they are attempted together instead of one backoff apart."""


NodeNote = Callable[[int], Mapping[str, object]]
"""What a plugin has to say about one node row (small, JSON-able values)."""

NODE_NOTES: StateKey[dict[str, NodeNote]] = StateKey("gpusched/node-notes")
"""Plugins that want their view of the chosen node in the decision record register a note
here (plugin name -> note); the record calls each once, for the chosen row only, so a
plugin keeps what it computed and words it only when the record is written. A note reads
only what the plugin kept, not the snapshot: the record is written after binding (or a
gang's wait at Permit), when the row's readings may have changed or the row may hold
another node."""


NoData = Callable[[int, int], bool]
"""Whether a Score plugin had no data for a node (its score there is a neutral stand-in),
asked with the node's snapshot row and its index among the rows the plugin scored (-1 when
not known): the index lets a plugin read what it computed per scored row directly."""

NO_DATA: StateKey[dict[str, NoData]] = StateKey("gpusched/no-data")
"""Score plugins whose score for a row can be a neutral stand-in for missing data (Thermal
without a fresh temperature, PowerHeadroom without power readings, NVLinkTopology on a node
whose islands nobody published) register a test here (plugin name -> test); the record asks
it for the chosen row only and writes "no data" instead of the neutral number. The test
answers from what Score computed, not from the snapshot (as a NODE_NOTES note)."""

CARD_REASON: StateKey[Callable[[], str]] = StateKey("gpusched/card-reason")
"""Why the Reserve plugin that chose the pod's cards chose those, in words: written where the
cards are chosen, worded only when the decision record is (one call per bound pod)."""


@dataclass(frozen=True, slots=True)
class ScoreUnit:
    """What a Score plugin's raw score measures, declared once on the plugin class as
    `score_unit` (an instance may replace it when its args change the meaning) and shown in
    the decision record beside the numbers. `unit`: what one raw point is; `meaning`: what a
    higher raw score says about the node, in a few words."""

    unit: str
    meaning: str


class WaitingPodView(Protocol):
    """A pod parked at Permit (core/runtime/waiting.py), as plugins see it."""

    @property
    def pod(self) -> PodInfo: ...

    @property
    def node(self) -> str: ...

    @property
    def done(self) -> bool:
        """Allowed, rejected or timed out already."""
        ...

    def allow(self, plugin: str) -> None:
        """`plugin` no longer holds the pod; it binds once no plugin does."""
        ...

    def reject(self, plugin: str, message: str) -> None:
        """Undo the pod's placement now (Unschedulable, with `message`)."""
        ...


class PodMatcher(Protocol):
    """Which existing pods count for a plugin (InterPodAffinity's terms, PodTopologySpread's
    constraints): a compiled label selector plus the namespaces it looks in. The cache counts
    the pods it matches per node (`Handle.count_matching_pods`) without walking every pod:
    it reads only the pods filed under `anchor` (or under `namespaces`, whichever is
    smaller) and asks `matches` of each."""

    @property
    def namespaces(self) -> frozenset[str] | None:
        """The namespaces a matching pod is in; None: every namespace."""
        ...

    @property
    def anchor(self) -> tuple[str, frozenset[str] | None] | None:
        """A condition every matching pod meets: label `key` present with one of `values`
        (None: any value); None when the selector has no such condition (e.g. only NotIn)."""
        ...

    def matches(self, pod: PodInfo) -> bool:
        """Whether `pod` counts (namespace and labels; a plugin may add its own conditions,
        e.g. skip terminating pods)."""
        ...


class ClusterPort(Protocol):
    """The writes a scheduler makes to the cluster: the API server in the daemon, the
    in-memory cluster in the simulator. Errors come back as a Status, never raised."""

    async def bind(
        self, pod: PodInfo, node: str, annotations: Mapping[str, str] | None = None
    ) -> Status: ...


class Handle(Protocol):
    """What the runtime offers plugins: the snapshot and views of the cluster."""

    @property
    def cluster(self) -> ClusterPort: ...

    @property
    def snapshot(self) -> NodeColumns:
        """The columns to read; only the cache writes them."""
        ...

    def now(self) -> float:
        """Seconds on the scheduler's clock (virtual in the simulator)."""
        ...

    def wall_now(self) -> float:
        """Unix seconds, the clock of the API's timestamps (a pod's status.startTime,
        gpusched.io/last-checkpoint-time); `now()` is monotonic in the daemon. The
        simulator's virtual clock (its pods' times are on it)."""
        ...

    def pods_on_node(self, node: str) -> Iterable[PodInfo]: ...

    def assumed_pods(self) -> Iterable[tuple[PodInfo, str]]:
        """Pods placed by this scheduler and not yet seen bound (bindings in flight, gang
        members waiting at Permit), with their node: placed, but not running yet."""
        ...

    def job_rows(self, job_key: str) -> Rows:
        """Snapshot rows holding pods (bound or assumed) of a training job, by the pod's
        `job_key` (namespace/job id)."""
        ...

    def used_host_ports(self) -> Mapping[str, UsedPorts]:
        """Host ports taken by pods (bound or assumed), only for nodes where any is: node
        name -> (protocol, port) -> host IP -> number of pods."""
        ...

    @property
    def volumes(self) -> VolumePort:
        """Claims, volumes, storage classes and CSINodes (framework/volumes.py)."""
        ...

    def count_matching_pods(self, matcher: PodMatcher) -> NDArray[np.int64]:
        """Per snapshot row (length `len(snapshot.node_valid)`), how many pods (bound or
        assumed) on that row's node `matcher` matches; 0 on empty rows."""
        ...

    def pods_with_affinity(
        self, *, required_anti_only: bool = False
    ) -> Sequence[tuple[PodInfo, int]]:
        """Pods (bound or assumed) on a snapshot row whose spec carries pod affinity or pod
        anti-affinity (only required anti-affinity with `required_anti_only`), with their
        row: kube-scheduler's PodsWithAffinity / PodsWithRequiredAntiAffinity."""
        ...

    def namespace_labels(self) -> Mapping[str, Mapping[str, str]]:
        """The labels of every namespace known (namespaceSelector); empty where namespaces
        are not watched (the simulator)."""
        ...

    @property
    def gangs(self) -> GangPort:
        """The PodGroup objects of both PodGroup APIs (framework/gangs.py)."""
        ...

    @property
    def dra(self) -> DraPort:
        """DeviceClasses, ResourceSlices and ResourceClaims (framework/dra.py)."""
        ...

    @property
    def tenancy(self) -> TenancyPort:
        """Tenants and their ElasticQuotas (framework/tenancy.py)."""
        ...

    @property
    def disruption(self) -> DisruptionPort:
        """PodDisruptionBudgets and preemption's writes (framework/disruption.py)."""
        ...

    def tenant_usage(self, tenant: str) -> Usage:
        """What the tenant's placed pods (bound or assumed, not finished) use, in quota units
        (model/quota.py)."""
        ...

    def tenant_usages(self) -> Mapping[str, Usage]:
        """Every tenant with placed pods -> what they use (as tenant_usage), in one pass
        over the namespaces (the fair queue reads all tenants at each pop)."""
        ...

    def tenant_gpu_rows(self, tenant: str) -> NDArray[np.int64]:
        """Per snapshot row, the milli-GPUs the tenant's placed pods (bound or assumed) hold
        on that row's node; 0 elsewhere (TenantLoad's load)."""
        ...

    def is_pending(self, uid: str) -> bool:
        """Whether the pod waits in this scheduler's queue (any sub-queue, gated, or in its
        attempt now): False once it is deleted, bound, or placed. Preemption drops the
        nomination of a preemptor that is no longer pending."""
        ...

    def allocation_of(self, uid: str) -> Allocation | None:
        """Where a placed pod (bound or assumed) is charged: its node's row and the card
        shares it holds there; None for a pod the cache does not place (pending, gone, or
        on a node it does not know). Preemption reads what evicting the pod frees."""
        ...

    def gang_members(self, key: str) -> Sequence[tuple[PodInfo, str]]:
        """Every live pod of gang `key` ("namespace/name") this scheduler knows, pending or
        placed, with the node the cache places it on ("" while pending; assumed pods count
        as placed)."""
        ...

    def get_waiting_pod(self, uid: str) -> WaitingPodView | None:
        """The pod parked at Permit with this uid (any profile's), if any."""
        ...

    def waiting_pods(self) -> Iterable[WaitingPodView]:
        """Every pod parked at Permit (a copy: callers reject while iterating)."""
        ...


class Plugin(Protocol):
    """Every plugin: a class-level `name` (the configuration's key), built once per profile
    as `cls(args, handle)` with its typed args. An exception raised by any method below is
    turned by the runtime into an Error status for that pod's attempt (requeued with
    backoff); a plugin never raises to say a pod does not fit: it returns a Status."""

    name: ClassVar[str]


@runtime_checkable
class QueueSortPlugin(Plugin, Protocol):
    def less(self, a: PodInfo, b: PodInfo) -> bool:
        """Whether `a` is popped before `b`: a strict weak order (exactly one per
        configuration; every profile must use the same one, since one queue orders all)."""
        ...


@runtime_checkable
class TenantFairSort(Protocol):
    """Optional for the QueueSort plugin: a queue order fair across tenants. The queue keeps
    one `less`-ordered heap per tenant and, at each pop, takes among the tenants' heads the
    highest priority, then the tenant with the lowest share now, then `less` (shares change
    as pods are placed, so they are read at pop time, never stored in a heap key)."""

    def tenant_of(self, pod: PodInfo) -> str:
        """The pod's tenant (Handle.tenancy, from its namespace); one value for every pod
        turns fairness off."""
        ...

    def shares(self, tenants: Collection[str]) -> Mapping[str, float]:
        """Each tenant's current share (lower pops first): called once per pop with the
        tenants whose heads tie on priority, so it must cost O(tenants), not O(pods)."""
        ...


@runtime_checkable
class PreEnqueuePlugin(Plugin, Protocol):
    def pre_enqueue(self, pod: PodInfo) -> Status:
        """Run by the queue each time a pod would enter activeQ (added, updated, or moved
        back): Success lets it in; anything else keeps it in the queue's gated set, not
        attempted, until an update of the pod passes every PreEnqueue plugin
        (kube-scheduler's PreEnqueue; e.g. SchedulingGates). Must be cheap: no snapshot."""
        ...


@runtime_checkable
class PodExpander(Plugin, Protocol):
    """A PreFilter plugin may also say how the cycle sees the pod: `expand` runs once before
    PreFilter, and the cycle (every plugin, and the cache's assume) sees what it returns.
    DynamicResources turns a pod's GPU claims into the GPU request the card plugins place."""

    def expand(self, pod: PodInfo) -> PodInfo: ...


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        """Once per attempt, before any Filter. Success (optionally narrowing the rows the
        pod may go to: the runtime intersects every plugin's rows), Skip (this plugin's
        Filter is not called for the pod), Unschedulable or UnschedulableAndUnresolvable
        (the attempt ends; the message becomes "0/N nodes are available: ..."), Error."""
        ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        """The candidate rows that pass, over the whole snapshot at once; must not write
        into `candidates`. Each rejected row's reason counts towards the pod's
        FailedScheduling message, and the plugin's name towards the requeue hint (which
        cluster events may make the pod schedulable)."""
        ...


@runtime_checkable
class PostFilterPlugin(Plugin, Protocol):
    def post_filter(
        self, state: CycleState, pod: PodInfo, diagnosis: Diagnosis
    ) -> tuple[str | None, Status]:
        """Runs only when no node passed Filter: try to make the pod schedulable
        (preemption). Success with a nominated node; Unschedulable (the next plugin tries);
        Error ends the attempt. The pod is requeued in every case: the nominated node is
        where it goes once the victims are gone."""
        ...


@runtime_checkable
class Nominator(Plugin, Protocol):
    """A PostFilter plugin that nominates nodes (preemption) says where a pod was nominated:
    when that node passes Filter the pod goes there, whatever the scores say (kube-
    scheduler's evaluateNominatedNode), so the room its victims freed is what it takes,
    not room another pod was counting on."""

    def nominated_node(self, pod: PodInfo) -> str | None: ...


@runtime_checkable
class PreScorePlugin(Plugin, Protocol):
    def pre_score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Status:
        """Once per attempt over the feasible rows, before Score: Success, Skip (this
        plugin's Score is not called), Error (the attempt ends)."""
        ...


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        """Raw scores, one per row of `rows` (the feasible rows), higher is better; in
        [0, 100] unless the plugin also normalises. A wrong length, NaN or a value out of
        range after normalising is an Error for the attempt. Every Score plugin also
        declares `score_unit: ClassVar[ScoreUnit]` (not part of this Protocol, so a test's
        ad-hoc plugin still passes isinstance; tests/unit/plugins check the real ones)."""
        ...


@runtime_checkable
class NormalizeScorePlugin(Plugin, Protocol):
    def normalize(self, state: CycleState, pod: PodInfo, scores: Scores) -> None:
        """Map raw scores to [0, 100] in place (kube-scheduler's ScoreExtensions)."""
        ...


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        """Claim what the pod gets on the chosen node. Unlike kube-scheduler, Reserve runs
        BEFORE the pod is assumed in the cache: the GPU plugin chooses the cards here and
        writes them to the cycle state (ALLOCATION), and the cache assumes the pod with
        exactly those cards. A GPU pod that reaches assume without an ALLOCATION is an
        Error, never assumed card-less. Non-success: the plugins reserved so far are
        unreserved in reverse order and the attempt ends."""
        ...

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """Undo `reserve`. Called on every failure after Reserve (a later Reserve plugin,
        Permit, the wait at Permit, PreBind, Bind, a cancelled binding), in reverse plugin
        order, also for a plugin whose own Reserve failed. Must be idempotent and must not
        raise (a raise is logged and the other plugins still run)."""
        ...


@runtime_checkable
class PermitPlugin(Plugin, Protocol):
    def permit(self, state: CycleState, pod: PodInfo, node: str) -> tuple[Status, float]:
        """After the pod is assumed. Success; Wait with a timeout in seconds (the pod is
        parked: its binding cycle waits until every waiting plugin allows it, one
        rejects it, or the earliest timeout passes, each an Unschedulable); Unschedulable
        or Error (the placement is undone). A plugin allows or rejects parked pods through
        the runtime's waiting pods, e.g. when a gang is complete."""
        ...


@runtime_checkable
class PreBindPlugin(Plugin, Protocol):
    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        """In the binding cycle (may await the API): prepare what the pod needs before it
        is bound. Non-success undoes the placement; Unschedulable parks the pod, Error
        backs it off; a Status whose error is a final ClusterWriteError (the pod is gone
        or bound elsewhere) ends the attempt without a retry."""
        ...


@runtime_checkable
class BindPlugin(Plugin, Protocol):
    async def bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        """Bind the pod to the node (the Binding subresource). Skip hands the pod to the
        next Bind plugin; failures as for PreBind."""
        ...


@runtime_checkable
class WarmStartPlugin(Plugin, Protocol):
    """Not an extension point: a plugin that learns from the pods it places (the shape
    learner) is handed, once, the pods of its profile already bound when this instance
    starts scheduling (it becomes the leader), so a new leader does not start blind."""

    def warm_start(self, pods: Sequence[PodInfo]) -> None: ...


@runtime_checkable
class TelemetryPlugin(Plugin, Protocol):
    """Not an extension point: a plugin that keeps state over live telemetry (Thermal's
    red-line latch) is told after every ingestion pass (the daemon's Prometheus refresh,
    the simulator's scrape), so it judges every sample, not only the ones a scheduling
    attempt happens to look at."""

    def telemetry_updated(self) -> None: ...


@runtime_checkable
class StatefulPlugin(Plugin, Protocol):
    """Not an extension point: a plugin whose Filter verdicts depend on what it saw before,
    not only on the snapshot (Thermal's red-line latch; GangScheduling's starvation clocks,
    reservation and the plans of the gangs assembling). `explain` answers on a copy of the
    scheduler built with new plugin instances (gpusched/explain/world.py); without this
    history the copy would let through a pod the scheduler refuses. `export_state` runs
    where the scheduling loop runs (the event loop), between two cycles, and returns a
    copy that shares nothing mutable with the plugin, naming nodes by name (a copy's
    snapshot rows differ); `import_state` seeds a new instance built with the same args
    on another snapshot, before its first cycle."""

    def export_state(self) -> object: ...

    def import_state(self, state: object) -> None: ...


@runtime_checkable
class PostBindPlugin(Plugin, Protocol):
    async def post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """Informational, after a successful Bind; cannot fail the pod (a raise is
        logged)."""
        ...


class Diagnosis:
    """Why nodes were rejected: rejected rows counted by reason, as in
    "0/N nodes are available: 3 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint".

    The Filter loop only records each plugin's result with the mask it was given; counting
    happens on first read, because most attempts succeed and nobody reads the counts on the
    simulator's hot path (measured: ~25 us a pod over 1,200 nodes).
    """

    __slots__ = ("_reasons", "_steps", "_unresolvable", "pre_filter_status", "total_nodes")

    def __init__(self, total_nodes: int = 0, pre_filter_status: Status | None = None) -> None:
        self.total_nodes = total_nodes
        self.pre_filter_status = pre_filter_status
        self._steps: list[tuple[Mask, FilterResult, str]] = []
        self._reasons: dict[str, int] | None = None
        self._unresolvable: Mask | None = None

    def record(self, candidates: Mask, result: FilterResult, plugin: str = "") -> None:
        self._steps.append((candidates, result, plugin))
        self._reasons = None

    @property
    def steps(self) -> tuple[tuple[Mask, FilterResult, str], ...]:
        """Each Filter's result with the candidate mask it was given, in the order they ran
        (gpusched/explain reads which plugin rejected which node, and why)."""
        return tuple(self._steps)

    @property
    def rejected_by(self) -> frozenset[str]:
        """The Filter plugins that rejected at least one node (kube-scheduler's
        UnschedulablePlugins): the requeue hint asks whether an event may change their mind."""
        return frozenset(
            plugin
            for before, res, plugin in self._steps
            if plugin and bool(np.any(before & ~res.feasible))
        )

    def _count(self) -> dict[str, int]:
        reasons: dict[str, int] = {}
        unresolvable: Mask | None = None
        for before, res, _plugin in self._steps:
            rejected = before & ~res.feasible
            n = int(np.count_nonzero(rejected))
            if not n or not res.reasons:
                continue
            if res.hits is not None:
                counts = np.count_nonzero(res.hits[:, rejected], axis=1)
            elif res.codes is not None:
                counts = np.bincount(res.codes[rejected], minlength=len(res.reasons))
            else:
                counts = np.array([n])  # every rejected row under reasons[0]
            for reason, count in zip(res.reasons, counts.tolist(), strict=False):
                if count:
                    reasons[reason] = reasons.get(reason, 0) + count
            if res.unresolvable is not False:
                rows = rejected if res.unresolvable is True else rejected & res.unresolvable
                unresolvable = rows if unresolvable is None else unresolvable | rows
        self._reasons = reasons
        self._unresolvable = unresolvable
        return reasons

    @property
    def reasons(self) -> dict[str, int]:
        return self._reasons if self._reasons is not None else self._count()

    @property
    def unresolvable_rows(self) -> Mask | None:
        """Rejected rows that preempting pods cannot fix (None: there are none)."""
        if self._reasons is None:
            self._count()
        return self._unresolvable

    def message(self) -> str:
        if self.pre_filter_status is not None and not self.pre_filter_status.is_success():
            return f"0/{self.total_nodes} nodes are available: {self.pre_filter_status.message()}."
        # kube-scheduler's sortReasonsHistogram: the "<count> <reason>" strings sorted.
        body = ", ".join(sorted(f"{n} {r}" for r, n in self.reasons.items()))
        return (
            f"0/{self.total_nodes} nodes are available: {body}."
            if body
            else (f"0/{self.total_nodes} nodes are available.")
        )

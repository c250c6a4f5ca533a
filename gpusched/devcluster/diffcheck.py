"""An independent judge of a scheduling outcome, read from the API's JSON alone.

The differential test (tests/integration/test_differential.py) gives one workload to
kube-scheduler and to gpusched on identical clusters and asks this module whether either
bound a pod where it cannot run. It shares no code with the schedulers: it imports nothing
from gpusched (an import-linter contract in pyproject.toml holds it to that), so a
misreading of the API in a plugin or its helpers cannot hide here. Plain Python over the
dicts of nodes, pods, PersistentVolumes and claims, written from the Kubernetes API
reference rather than from either scheduler.

What `check` verifies for the bound, non-terminal pods (each a hard constraint the kubelet
or the user's intent relies on):

* resources: per node, every requested resource (cpu, memory, ephemeral-storage,
  hugepages, nvidia.com/gpu and any other extended resource) summed within allocatable,
  and the pod count within allocatable `pods`;
* host ports unique per node and protocol, 0.0.0.0 (or no hostIP) clashing with any IP;
* nodeSelector and required node affinity, NoSchedule/NoExecute taints tolerated,
  `spec.unschedulable` nodes avoided (unless the pod tolerates that taint key);
* gated pods (non-empty `schedulingGates`) unbound;
* required inter-pod affinity and anti-affinity (the pod's own terms, which also covers
  existing pods' anti-affinity against a newcomer: every pod's terms are checked against
  every other pod);
* hard topology spread (`DoNotSchedule`) within maxSkew, honouring minDomains;
* the node affinity of the PersistentVolumes bound to the pod's claims.

A check of a final state, not of each decision: see the notes on affinity and spread at
their functions for what that can and cannot see.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

JSON = dict[str, Any]
Labels = Mapping[str, str]

HOSTNAME = "kubernetes.io/hostname"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
WILDCARD_IP = "0.0.0.0"

# -- quantities ------------------------------------------------------------------------------

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


def quantity(value: object) -> Fraction:
    """A Kubernetes resource quantity ("100m", "2Gi", "1e3", 4) as an exact number."""
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(f"not a resource quantity: {value!r}")
    number, exponent, suffix = match.groups()
    base = Fraction(number)
    if exponent:
        return base * Fraction(10) ** int(exponent[1:])
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    return base * _DECIMAL[suffix or ""]


# -- pods ------------------------------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> JSON:
    return dict(obj.get("metadata") or {})


def _spec(obj: Mapping[str, Any]) -> JSON:
    return dict(obj.get("spec") or {})


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = _meta(pod)
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(_meta(obj).get("labels") or {})


def node_of(pod: Mapping[str, Any]) -> str:
    return str(_spec(pod).get("nodeName") or "")


def terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _container_requests(container: Mapping[str, Any]) -> dict[str, Fraction]:
    resources = container.get("resources") or {}
    # Limits stand in for absent requests (the API server defaults them so; a pod read
    # back from it already has them, a hand-built one may not).
    out = {k: quantity(v) for k, v in (resources.get("limits") or {}).items()}
    out.update({k: quantity(v) for k, v in (resources.get("requests") or {}).items()})
    return out


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Fraction]:
    """What the pod holds on its node, per resource, as the kubelet admits it: the sum over
    its containers and sidecars (init containers with restartPolicy Always), at least each
    ordinary init container's request plus the sidecars started before it, plus the
    RuntimeClass overhead."""
    spec = _spec(pod)
    total: dict[str, Fraction] = defaultdict(Fraction)
    for c in spec.get("containers") or ():
        for k, v in _container_requests(c).items():
            total[k] += v
    sidecars: dict[str, Fraction] = defaultdict(Fraction)
    init_peak: dict[str, Fraction] = defaultdict(Fraction)
    for c in spec.get("initContainers") or ():
        requests = _container_requests(c)
        if c.get("restartPolicy") == "Always":
            for k, v in requests.items():
                sidecars[k] += v
                init_peak[k] = max(init_peak[k], sidecars[k])
        else:
            for k, v in requests.items():
                init_peak[k] = max(init_peak[k], sidecars[k] + v)
    for k, v in sidecars.items():
        total[k] += v
    for k, v in init_peak.items():
        total[k] = max(total[k], v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] += quantity(v)
    return {k: v for k, v in total.items() if v}


def host_ports(pod: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """(protocol, hostIP, hostPort) of every container port with a hostPort."""
    spec = _spec(pod)
    out = []
    for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
        for p in c.get("ports") or ():
            port = int(p.get("hostPort") or 0)
            if port:
                ip = str(p.get("hostIP") or WILDCARD_IP)
                out.append((str(p.get("protocol") or "TCP"), ip, port))
    return out


def ports_clash(a: tuple[str, str, int], b: tuple[str, str, int]) -> bool:
    """Same protocol and port, and the same IP or either one the wildcard."""
    return a[0] == b[0] and a[2] == b[2] and (a[1] == b[1] or WILDCARD_IP in (a[1], b[1]))


# -- selectors ---------------------------------------------------------------------------------


def _number(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def requirement_matches(labels: Labels, req: Mapping[str, Any]) -> bool:
    """One NodeSelectorRequirement or LabelSelectorRequirement against a label map."""
    key = str(req.get("key", ""))
    op = str(req.get("operator", ""))
    values = [str(v) for v in req.get("values") or ()]
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        have = _number(labels[key]) if present else None
        want = _number(values[0]) if len(values) == 1 else None
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    raise ValueError(f"unknown selector operator {op!r}")


def label_selector_matches(selector: Mapping[str, Any] | None, labels: Labels) -> bool:
    """A metav1.LabelSelector: None matches nothing, {} matches everything."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    return all(requirement_matches(labels, r) for r in selector.get("matchExpressions") or ())


def node_selector_term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """A NodeSelectorTerm (its expressions and fields ANDed); an empty term matches nothing."""
    exprs = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not exprs and not fields:
        return False
    labels = labels_of(node)
    node_fields = {"metadata.name": str(_meta(node).get("name", ""))}
    return all(requirement_matches(labels, r) for r in exprs) and all(
        requirement_matches(node_fields, r) for r in fields
    )


def node_selector_matches(selector: Mapping[str, Any] | None, node: Mapping[str, Any]) -> bool:
    """A NodeSelector: its terms ORed; None matches every node."""
    if selector is None:
        return True
    return any(node_selector_term_matches(t, node) for t in selector.get("nodeSelectorTerms") or ())


def pod_node_affinity_matches(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """spec.nodeSelector and the required node affinity, both."""
    spec = _spec(pod)
    labels = labels_of(node)
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return node_selector_matches(required, node)


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = t.get("key") or ""
        op = t.get("operator") or "Equal"
        if not key:
            if op == "Exists":
                return True  # an empty key with Exists tolerates everything
            continue
        if key != taint.get("key"):
            continue
        if op == "Exists" or str(t.get("value") or "") == str(taint.get("value") or ""):
            return True
    return False


def untolerated_taints(pod: Mapping[str, Any], node: Mapping[str, Any]) -> list[JSON]:
    """The node's NoSchedule/NoExecute taints the pod does not tolerate."""
    tolerations = _spec(pod).get("tolerations") or ()
    return [
        dict(t)
        for t in _spec(node).get("taints") or ()
        if t.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, t)
    ]


def unschedulable_blocks(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """The node is cordoned and the pod does not tolerate the unschedulable taint."""
    if not _spec(node).get("unschedulable"):
        return False
    taint = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    return not tolerates(_spec(pod).get("tolerations") or (), taint)


# -- the outcome -------------------------------------------------------------------------------


@dataclass
class Outcome:
    """The API objects a check reads. `namespaces`: name -> labels (for namespaceSelector);
    `claims` keyed "namespace/name"; `volumes` by PV name."""

    nodes: list[JSON]
    pods: list[JSON]
    claims: dict[str, JSON] = field(default_factory=dict)
    volumes: dict[str, JSON] = field(default_factory=dict)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_node = {str(_meta(n).get("name")): n for n in self.nodes}
        self.placed = [p for p in self.pods if node_of(p) and not terminal(p)]


def check(outcome: Outcome, judged: Callable[[JSON], bool] = lambda _pod: True) -> list[str]:
    """Every hard constraint the outcome violates (empty: none). Resources and host ports
    count every placed pod; the pod's own constraints are checked only for pods `judged`
    says a scheduler placed (not, say, pods created with spec.nodeName)."""
    out: list[str] = []
    out += check_resources(outcome)
    out += check_host_ports(outcome)
    for pod in outcome.pods:
        if not judged(pod):
            continue
        if _spec(pod).get("schedulingGates") and node_of(pod):
            out.append(f"{pod_key(pod)}: bound to {node_of(pod)} while scheduling-gated")
    for pod in outcome.placed:
        if judged(pod):
            out += check_node_constraints(outcome, pod)
            out += check_pod_affinity(outcome, pod)
            out += check_topology_spread(outcome, pod)
            out += check_volumes(outcome, pod)
    return out


def check_resources(outcome: Outcome) -> list[str]:
    used: dict[str, dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
    count: dict[str, int] = defaultdict(int)
    for pod in outcome.placed:
        where = node_of(pod)
        count[where] += 1
        for k, v in pod_requests(pod).items():
            used[where][k] += v
    out = []
    for node_name in sorted(set(used) | set(count)):
        node = outcome.by_node.get(node_name)
        if node is None:
            out.append(f"{count[node_name]} pod(s) bound to {node_name}, which does not exist")
            continue
        alloc = {
            k: quantity(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()
        }
        if count[node_name] > alloc.get("pods", Fraction(0)):
            out.append(f"{node_name}: {count[node_name]} pods > allocatable {alloc.get('pods', 0)}")
        for k, v in sorted(used[node_name].items()):
            if v > alloc.get(k, Fraction(0)):
                out.append(
                    f"{node_name}: {k} requested {float(v):g} > allocatable"
                    f" {float(alloc.get(k, 0)):g}"
                )
    return out


def check_host_ports(outcome: Outcome) -> list[str]:
    seen: dict[str, list[tuple[tuple[str, str, int], str]]] = defaultdict(list)
    out = []
    for pod in outcome.placed:
        node = node_of(pod)
        for port in host_ports(pod):
            for other, owner in seen[node]:
                if ports_clash(port, other):
                    out.append(f"{node}: host port {port} of {pod_key(pod)} clashes with {owner}")
            seen[node].append((port, pod_key(pod)))
    return out


def check_node_constraints(outcome: Outcome, pod: JSON) -> list[str]:
    key, node_name = pod_key(pod), node_of(pod)
    node = outcome.by_node.get(node_name)
    if node is None:
        return []  # check_resources reported it
    out = []
    if not pod_node_affinity_matches(pod, node):
        out.append(f"{key}: on {node_name}, which its nodeSelector/node affinity excludes")
    for taint in untolerated_taints(pod, node):
        out.append(f"{key}: on {node_name}, whose taint {taint} it does not tolerate")
    if unschedulable_blocks(pod, node):
        out.append(f"{key}: on {node_name}, which is unschedulable")
    return out


def _term_namespaces(outcome: Outcome, pod: JSON, term: Mapping[str, Any]) -> set[str] | None:
    """The namespaces a PodAffinityTerm selects from (None: all)."""
    names = set(term.get("namespaces") or ())
    selector = term.get("namespaceSelector")
    if selector is not None:
        if not selector.get("matchLabels") and not selector.get("matchExpressions"):
            return None  # {} selects every namespace
        names |= {
            n
            for n, labels in outcome.namespaces.items()
            if label_selector_matches(selector, labels)
        }
    elif not names:
        names = {str(_meta(pod).get("namespace", ""))}
    return names


def _term_matches(
    outcome: Outcome, pod: JSON, term: Mapping[str, Any], other: Mapping[str, Any]
) -> bool:
    namespaces = _term_namespaces(outcome, pod, term)
    if namespaces is not None and str(_meta(other).get("namespace", "")) not in namespaces:
        return False
    selector = (
        dict(term.get("labelSelector") or {}) if term.get("labelSelector") is not None else None
    )
    if selector is not None:
        # matchLabelKeys / mismatchLabelKeys (1.33+ beta): the pod's own values joined in.
        own = labels_of(pod)
        extra = [
            {"key": k, "operator": "In", "values": [own[k]]}
            for k in term.get("matchLabelKeys") or ()
            if k in own
        ] + [
            {"key": k, "operator": "NotIn", "values": [own[k]]}
            for k in term.get("mismatchLabelKeys") or ()
            if k in own
        ]
        selector["matchExpressions"] = [*(selector.get("matchExpressions") or ()), *extra]
    return label_selector_matches(selector, labels_of(other))


def _domain(outcome: Outcome, node_name: str, topology_key: str) -> str | None:
    node = outcome.by_node.get(node_name)
    return labels_of(node).get(topology_key) if node is not None else None


def check_pod_affinity(outcome: Outcome, pod: JSON) -> list[str]:
    """Required pod affinity and anti-affinity of a placed pod, against the other placed pods.

    Anti-affinity: no other placed pod the term selects shares the pod's domain. Checking
    every pod's own terms covers the symmetric rule too (an existing pod's anti-affinity
    against the newcomer is that pod's term, checked when the loop reaches it).

    Affinity: some other placed pod the term selects is in the pod's domain, or no other
    pod anywhere matches and the pod matches its own term (kube-scheduler's rule that the
    first pod of a self-affine group may go anywhere). A final state cannot show arrival
    order, so a group whose first member's partners were later deleted would look like a
    violation: the differential workload deletes nothing while it is judged."""
    affinity = _spec(pod).get("affinity") or {}
    key, node_name = pod_key(pod), node_of(pod)
    out = []
    others = [p for p in outcome.placed if p is not pod]
    anti = (affinity.get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or ()
    for term in anti:
        tk = str(term.get("topologyKey", ""))
        mine = _domain(outcome, node_name, tk)
        if mine is None:
            continue  # a node without the key is its own, empty, domain
        clash = [
            pod_key(o)
            for o in others
            if _domain(outcome, node_of(o), tk) == mine and _term_matches(outcome, pod, term, o)
        ]
        if clash:
            out.append(f"{key}: anti-affinity ({tk}={mine}) violated by {clash[:3]}")
    required = (affinity.get("podAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or ()
    for term in required:
        tk = str(term.get("topologyKey", ""))
        mine = _domain(outcome, node_name, tk)
        matching = [o for o in others if _term_matches(outcome, pod, term, o)]
        if mine is None:
            out.append(f"{key}: pod affinity on {tk}, which {node_name} lacks")
            continue
        if any(_domain(outcome, node_of(o), tk) == mine for o in matching):
            continue
        if not matching and _term_matches(outcome, pod, term, pod):
            continue
        out.append(f"{key}: no pod its affinity selects in {tk}={mine}")
    return out


def _hard_spread(pod: Mapping[str, Any]) -> list[JSON]:
    return [
        dict(c)
        for c in _spec(pod).get("topologySpreadConstraints") or ()
        if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
    ]


def check_topology_spread(outcome: Outcome, pod: JSON) -> list[str]:
    """Hard spread constraints of a placed pod in the final state: the pod's domain holds
    at most maxSkew more selected pods than the emptiest eligible domain (treated as 0 when
    fewer than minDomains domains are eligible).

    Eligible domains: those of nodes with the topology key that pass the pod's nodeSelector
    and required node affinity (nodeAffinityPolicy Honor, the default) and, with
    nodeTaintsPolicy Honor, whose taints it tolerates (Ignore, the default: all). The skew
    a scheduler checks when it places a pod only grows the maximum within maxSkew of the
    minimum, and the minimum never falls while pods are only added, so the final state
    obeys the bound whenever the selected pods all carry the constraint (the differential
    workload's spread groups do)."""
    key, node_name = pod_key(pod), node_of(pod)
    out = []
    namespace = _meta(pod).get("namespace", "")
    own = labels_of(pod)
    for c in _hard_spread(pod):
        tk = str(c.get("topologyKey", ""))
        mine = _domain(outcome, node_name, tk)
        if mine is None:
            out.append(f"{key}: spread over {tk}, which {node_name} lacks")
            continue
        selector = dict(c.get("labelSelector") or {})
        selector["matchExpressions"] = [
            *(selector.get("matchExpressions") or ()),
            *(
                {"key": k, "operator": "In", "values": [own[k]]}
                for k in c.get("matchLabelKeys") or ()
                if k in own
            ),
        ]
        honour_affinity = c.get("nodeAffinityPolicy", "Honor") == "Honor"
        honour_taints = c.get("nodeTaintsPolicy", "Ignore") == "Honor"
        counts: dict[str, int] = {}
        for node in outcome.nodes:
            domain = labels_of(node).get(tk)
            if domain is None:
                continue
            if honour_affinity and not pod_node_affinity_matches(pod, node):
                continue
            if honour_taints and untolerated_taints(pod, node):
                continue
            counts.setdefault(domain, 0)
        for other in outcome.placed:
            domain = _domain(outcome, node_of(other), tk)
            if (
                domain in counts
                and _meta(other).get("namespace", "") == namespace
                and label_selector_matches(selector, labels_of(other))
            ):
                counts[domain] += 1
        if mine not in counts:
            out.append(f"{key}: on {node_name}, outside the domains its spread over {tk} allows")
            continue
        min_domains = int(c.get("minDomains") or 1)
        floor = min(counts.values()) if len(counts) >= min_domains else 0
        skew = counts[mine] - floor
        if skew > int(c.get("maxSkew", 1)):
            out.append(
                f"{key}: spread over {tk} skew {skew} > maxSkew {c.get('maxSkew')}"
                f" (counts {dict(sorted(counts.items()))}, minDomains {min_domains})"
            )
    return out


def check_volumes(outcome: Outcome, pod: JSON) -> list[str]:
    """Each claim the pod mounts exists, and the node affinity of its bound PV admits the
    pod's node."""
    key, node_name = pod_key(pod), node_of(pod)
    node = outcome.by_node.get(node_name)
    namespace = _meta(pod).get("namespace", "")
    out = []
    for volume in _spec(pod).get("volumes") or ():
        source = volume.get("persistentVolumeClaim")
        if not source:
            continue
        claim = outcome.claims.get(f"{namespace}/{source.get('claimName')}")
        if claim is None:
            out.append(f"{key}: bound, but its claim {source.get('claimName')} does not exist")
            continue
        pv_name = _spec(claim).get("volumeName")
        if not pv_name:
            continue  # not bound yet (WaitForFirstConsumer): nothing pins a node
        pv = outcome.volumes.get(str(pv_name))
        if pv is None:
            out.append(f"{key}: its claim is bound to {pv_name}, which does not exist")
            continue
        required = (_spec(pv).get("nodeAffinity") or {}).get("required")
        if node is not None and not node_selector_matches(required, node):
            out.append(f"{key}: on {node_name}, outside the node affinity of its volume {pv_name}")
    return out


# -- FailedScheduling messages ----------------------------------------------------------------

# kube-scheduler's FitError: "0/N nodes are available: <pre-filter message>." or
# "0/N nodes are available: <count> <reason>, <count> <reason>." then, from PostFilter
# (preemption), " preemption: ..." or other text. Reasons hold dots ("nvidia.com/gpu"), so
# the body ends at the last "." before the post-filter part or the end.
_FIT_ERROR = re.compile(
    r"^0/(?P<total>\d+) nodes are available(?:: (?P<body>.*?))?\.(?: (?P<post>\S.*))?$",
    re.DOTALL,
)
_COUNTED = re.compile(r"^(?P<count>\d+) (?P<reason>\S.*)$")


@dataclass(frozen=True)
class FitMessage:
    """A parsed "0/N nodes are available: ..." message."""

    total: int
    reasons: dict[str, int]  # reason -> node count, e.g. {"Insufficient cpu": 3}
    pre_filter: str  # the whole-pod reason when no node was tried (else "")
    post_filter: str  # what followed (kube-scheduler: "preemption: ...")

    @property
    def shape(self) -> tuple[int, str, tuple[tuple[str, int], ...]]:
        """What two schedulers' messages for one pod must share."""
        return self.total, self.pre_filter, tuple(sorted(self.reasons.items()))


def parse_fit_message(message: str) -> FitMessage:
    """Parse a FailedScheduling message; ValueError if it is not in kube-scheduler's form
    (counts summing past the node total included)."""
    match = _FIT_ERROR.match(message.strip())
    if match is None:
        raise ValueError(f"not a '0/N nodes are available' message: {message!r}")
    total = int(match["total"])
    body = match["body"] or ""
    reasons: dict[str, int] = {}
    pre_filter = ""
    items = body.split(", ") if body else []
    counted = [_COUNTED.match(i) for i in items]
    if items and all(counted):
        for m in counted:
            assert m is not None
            reason = m["reason"]
            if reason in reasons:
                raise ValueError(f"reason {reason!r} listed twice in {message!r}")
            reasons[reason] = int(m["count"])
    elif body:
        pre_filter = body
    # One node fails one plugin, but that plugin may give several reasons (cpu and memory
    # both short): counts may sum past the total, each alone may not.
    over = [r for r, n in reasons.items() if n > total or n <= 0]
    if over:
        raise ValueError(f"reason count outside 1..{total} for {over} in {message!r}")
    return FitMessage(total, reasons, pre_filter, match["post"] or "")

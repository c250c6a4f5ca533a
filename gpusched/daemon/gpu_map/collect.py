"""The GPU map's data from the running daemon: its cache's snapshot columns and pods, its
queue, the gang board, the quota watch, and the pending reasons routes.py hears.

Runs on the daemon's event loop between two awaits, so it sees one consistent state, and
only reads: no cache, memo or board is written (Handle.tenant_usage memoises its grouping,
so the tenants' usage is summed here from the cache's per-namespace sums instead).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from gpusched.core.queue import QueuedPodInfo
from gpusched.daemon.gpu_map.view import (
    CardView,
    GangView,
    MapData,
    NodeView,
    PendingView,
    QuotaRow,
    QuotaView,
    by_reason,
)
from gpusched.framework.snapshot import NO_CARD
from gpusched.model import quota
from gpusched.model.node import FULL_CARD_MILLI
from gpusched.model.pod import PodRequest
from gpusched.plugins.thermal.args import ThermalArgs

if TYPE_CHECKING:
    from gpusched.daemon.daemon import Daemon

NODES_PER_PAGE = 1000  # 8,000 cards draw in well under a second (docs/gpu-map.md)
MAX_PENDING_SHOWN = 200  # a backlog of 20,000 pods is summarised by reason, not listed
# The queue's sub-queues, the ones waiting longest for a reason first.
_QUEUE_ORDER = {"unschedulable": 0, "gated": 1, "backoff": 2, "active": 3, "inflight": 4}

Reasons = Callable[[str], tuple[str, str] | None]  # pod uid -> (reason, message)
NodeKey = tuple[str, int, int, int, tuple[float | None, ...]]
NodeViews = dict[NodeKey, NodeView]  # by _version


def thermal_lines(daemon: Daemon) -> tuple[float, float]:
    """(red line, cool) °C: the Thermal plugin's args of the first profile that sets them
    (the configuration in use, after any hot reload), else its defaults."""
    for profile in daemon.config.profiles:
        args = profile.plugin_args.get("Thermal")
        if isinstance(args, ThermalArgs):
            return args.red_line_celsius, args.cool_celsius
    default = ThermalArgs()
    return default.red_line_celsius, default.cool_celsius


def collect(
    daemon: Daemon,
    reasons: Reasons,
    *,
    page: int = 0,
    per_page: int = NODES_PER_PAGE,
    clock: Callable[[], float] = time.time,
    views: NodeViews | None = None,
) -> MapData:
    """`views`: the node views of the previous call, reused for the rows that did not
    change since (and replaced by this call's)."""
    red_line, cool = thermal_lines(daemon)
    snap = daemon.cache.snapshot
    order = sorted(snap.rows, key=lambda name: (_rack(daemon, name), name))
    pages = max(1, -(-len(order) // per_page))
    page = min(max(page, 0), pages - 1)
    chosen = order[page * per_page : (page + 1) * per_page]
    previous = views if views is not None else {}
    fresh: NodeViews = {}
    nodes = []
    for name in chosen:
        key = _version(daemon, name)
        view = previous.get(key)
        if view is None:
            view = _node(daemon, name)
        fresh[key] = view
        nodes.append(view)
    previous.clear()
    previous.update(fresh)
    pending = sorted(_queued(daemon), key=lambda i: (_QUEUE_ORDER.get(i.where, 9), i.pod.key))
    shown = [_pending(info, reasons) for info in pending]
    return MapData(
        nodes=tuple(nodes),
        pending=tuple(shown[:MAX_PENDING_SHOWN]),
        pending_total=len(shown),
        pending_by_reason=by_reason(shown),
        gangs=_gangs(daemon),
        quotas=_quotas(daemon),
        red_line=red_line,
        cool=cool,
        telemetry=daemon.telemetry is not None,
        leading=daemon.leading.is_set(),
        generated_at=clock(),
        page=page,
        pages=pages,
        nodes_total=len(order),
    )


def _rack(daemon: Daemon, name: str) -> str:
    node = daemon.cache.snapshot.nodes[daemon.cache.snapshot.rows[name]]
    return node.rack if node is not None else ""


def _version(daemon: Daemon, name: str) -> NodeKey:
    """What a node's view depends on: its row's version (bumped by every change of its
    node object, cards, health or the pods on it, assumed ones included), the model names'
    numbering, and the row's readings (which bump no row version; keyed by value, so a
    telemetry refresh rebuilds only the nodes whose temperatures moved)."""
    snap = daemon.cache.snapshot
    row = snap.rows[name]
    temps = tuple(_reading(t) for t in snap.card_temp[row].tolist())
    return (name, row, int(snap.row_version[row]), snap.models.epoch, temps)


def _node(daemon: Daemon, name: str) -> NodeView:
    snap = daemon.cache.snapshot
    row = snap.rows[name]
    node = snap.nodes[row]
    # (held by a whole-card pod, the pods holding it) per card, from this node's pods only.
    holders: dict[int, tuple[bool, list[str]]] = {}
    for pod in daemon.cache.pods_on_node(name):
        entry = daemon.cache.get(pod.uid)
        alloc = entry.alloc if entry is not None else None
        if alloc is None:
            continue
        whole = pod.request.gpu_cards > 0
        for card in alloc.cards:
            was, pods = holders.get(card, (False, []))
            pods.append(pod.key)
            holders[card] = (was or whole, pods)
    # One list per column of the row: numpy item access per card costs more than the rest.
    models = snap.card_model[row].tolist()
    free = snap.card_free_milli[row].tolist()
    healthy = snap.card_healthy[row].tolist()
    temps = snap.card_temp[row].tolist()
    cards = []
    for index, model_id in enumerate(models):
        if model_id == NO_CARD:
            continue
        whole, pods = holders.get(index, (False, []))
        cards.append(
            CardView(
                index=index,
                model=str(snap.models.values[model_id]),
                used_milli=FULL_CARD_MILLI - free[index],
                whole=whole,
                healthy=healthy[index],
                temp=_reading(temps[index]),
                pods=tuple(sorted(pods)),
            )
        )
    return NodeView(
        name=name,
        rack=node.rack if node is not None else "",
        cards=tuple(cards),
        temp=_reading(float(snap.node_temp[row])),
        cordoned=bool(node.unschedulable) if node is not None else False,
    )


def _reading(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 1)


def _queued(daemon: Daemon) -> Iterable[QueuedPodInfo]:
    q = daemon.queue
    yield from q.active
    yield from q.backoff
    yield from q.unschedulable
    yield from q.gated.values()
    yield from q.inflight.values()


def request_text(request: PodRequest) -> str:
    if request.gpu_cards:
        return f"{request.gpu_cards} GPU" + ("s" if request.gpu_cards > 1 else "")
    if request.gpu_milli:
        return f"{request.gpu_milli}m of a GPU"
    if request.gpu_mem_mib:
        return f"{request.gpu_mem_mib} MiB of a GPU"
    return "no GPU"


def _pending(info: QueuedPodInfo, reasons: Reasons) -> PendingView:
    heard = reasons(info.pod.uid)
    reason, message = heard if heard is not None else ("", "")
    return PendingView(
        pod=info.pod.key,
        queue=info.where or "active",
        request=request_text(info.pod.request),
        reason=reason,
        message=message,
        attempts=info.attempts,
    )


def _gangs(daemon: Daemon) -> tuple[GangView, ...]:
    if daemon.pod_groups is None:
        return ()
    board = daemon.gang_board
    out = []
    for (api, key), spec in sorted(daemon.pod_groups.groups.items(), key=lambda kv: kv[0][1]):
        report = board.report((api, key)) if board is not None else None
        out.append(
            GangView(
                key=key,
                api=api.value.split(" ")[0],
                min_member=spec.min_member if spec.gang else 1,
                placed=report.placed if report else 0,
                running=report.running if report else 0,
                pending=report.pending if report else 0,
                finished=(report.succeeded + report.failed) if report else 0,
                reason=report.reason if report else "",
                message=report.message if report else "",
                problem=spec.problem,
            )
        )
    return tuple(out)


def _quotas(daemon: Daemon) -> tuple[QuotaView, ...]:
    tenants = daemon.quotas.tenants()
    if not tenants:
        return ()
    usage: dict[str, quota.Usage] = {}
    for namespace, used in daemon.cache.namespace_usage().items():
        tenant = daemon.quotas.tenant_of(namespace)
        usage[tenant] = quota.add(usage[tenant], used) if tenant in usage else used
    out = []
    for tenant, specs in sorted(tenants.items()):
        used = usage.get(tenant, quota.ZERO)
        for spec in specs:
            shown = set(spec.named) | {quota.GPU}
            rows = tuple(
                QuotaRow(name, used[i], spec.min[i], spec.max[i])
                for i, name in enumerate(quota.RESOURCES)
                if name in shown
            )
            # The tenant's quota names what makes its pods refused (a malformed object, two
            # objects for one tenant); the object's own problem first.
            tq = daemon.quotas.quota(tenant)
            problem = spec.problem or (tq.problem if tq is not None else "")
            out.append(QuotaView(key=spec.key, tenant=tenant, rows=rows, problem=problem))
    return tuple(out)

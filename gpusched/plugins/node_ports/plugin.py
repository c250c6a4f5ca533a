"""NodePorts (PreFilter, Filter): the pod's host ports must be free on the node.

kube-scheduler's HostPortInfo semantics: a port is (host IP, protocol, port); host IP
0.0.0.0 takes the port on every address, so it conflicts with the same protocol and port on
any IP, and a specific IP conflicts with itself and with 0.0.0.0. The cache keeps each
node's ports in use (bound and assumed pods), and only nodes with any are kept, so Filter
looks at those nodes, never at every pod.
"""

from __future__ import annotations

from typing import ClassVar

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import (
    FilterResult,
    Handle,
    Mask,
    PreFilterResult,
    UsedPorts,
)
from gpusched.framework.status import SUCCESS, Status, skip
from gpusched.model.pod import WILDCARD_IP, HostPort, PodInfo

REASON = "node(s) didn't have free ports for the requested pod ports"


def conflicts(wanted: tuple[HostPort, ...], used: UsedPorts) -> bool:
    """Whether any wanted port clashes with the node's ports in use (CheckConflict)."""
    for hp in wanted:
        ips = used.get((hp.protocol, hp.port))
        if ips and (hp.ip == WILDCARD_IP or WILDCARD_IP in ips or hp.ip in ips):
            return True
    return False


class NodePorts:
    name: ClassVar[str] = "NodePorts"

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        # No host port: Filter is not run (kube-scheduler's PreFilter Skip).
        if not pod.host_ports:
            return None, skip()
        return None, SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        if not pod.host_ports:
            return FilterResult(candidates)
        snap = self.handle.snapshot
        n = len(candidates)
        taken = [
            row
            for node, used in self.handle.used_host_ports().items()
            if conflicts(pod.host_ports, used) and 0 <= (row := snap.row_of(node)) < n
        ]
        if not taken or not candidates[taken].any():
            return FilterResult(candidates)
        feasible = candidates.copy()
        feasible[taken] = False
        # Unschedulable, not unresolvable: preempting the pod that holds the port frees it.
        return FilterResult(feasible, (REASON,))

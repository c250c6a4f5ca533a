"""DefaultBinder (Bind): POST the binding through the cluster port, carrying the annotations
PreBind plugins put in BINDING_ANNOTATIONS (the card assignment)."""

from __future__ import annotations

from typing import ClassVar

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import BINDING_ANNOTATIONS, Handle
from gpusched.framework.status import Status
from gpusched.model.pod import PodInfo


class DefaultBinder:
    name: ClassVar[str] = "DefaultBinder"

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle

    async def bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        # The port turns API errors into a Status (never raises), so pass it through: the
        # runtime unreserves and backs the pod off on anything but Success.
        return await self.handle.cluster.bind(pod, node, state.get(BINDING_ANNOTATIONS))

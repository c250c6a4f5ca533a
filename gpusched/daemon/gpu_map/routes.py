"""GET /map (HTML) and GET /map.json on the metrics server (observability/metrics.py
`serve(..., routes=...)`), registered by `gpusched run --gpu-map` only.

The pending reasons: the daemon does not keep the message of a pod's last failed attempt
(it writes it to the API as the FailedScheduling Event and PodScheduled condition), so
`PendingReasons` listens on the callbacks that carry it, the Reporter's `on_attempt` (the
PodGroup status board's hook) and the queue's `on_gated`, chained in front of what was
there: the board and the gated decision records hear exactly what they heard before.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from gpusched.daemon.gpu_map.collect import NODES_PER_PAGE, NodeViews, collect
from gpusched.daemon.gpu_map.render import SCRIPT_HASH, Fragments, render_html, to_json_bytes
from gpusched.daemon.gpu_map.view import MapData
from gpusched.daemon.reporting import Reporter
from gpusched.framework.status import Status
from gpusched.model.pod import PodInfo

if TYPE_CHECKING:
    from gpusched.daemon.daemon import Daemon

# Reasons kept for pods no longer queued are dropped at each render; this bounds the map
# between renders on a cluster nobody looks at (the oldest forgotten first).
MAX_REASONS = 20_000
# One render serves every request within this long: a dozen open tabs polling cost one.
CACHE_SECONDS = 1.0
GATED = "Gated"
# The page may run its own inline script (by hash) and fetch from its origin, nothing else:
# should a cluster string ever escape escaping, it could not run or load anything.
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; "
    f"script-src '{SCRIPT_HASH}'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class PendingReasons:
    """Pod uid -> (reason, message) of its latest refusal, while it is pending."""

    def __init__(self, limit: int = MAX_REASONS) -> None:
        self.limit = limit
        self._by_uid: OrderedDict[str, tuple[str, str]] = OrderedDict()

    def attempted(self, pod: PodInfo, reason: str, message: str) -> None:
        """Reporter.on_attempt: reason "" when placed (forgotten), else Unschedulable or
        SchedulerError with the FailedScheduling message."""
        if not reason:
            self._by_uid.pop(pod.uid, None)
            return
        self._remember(pod.uid, (reason, message))

    def gated(self, pod: PodInfo, status: Status) -> None:
        """SchedulingQueue.on_gated: a PreEnqueue plugin keeps the pod out of the queue."""
        plugin = f"{status.plugin}: " if status.plugin else ""
        self._remember(pod.uid, (GATED, plugin + status.message()))

    def _remember(self, uid: str, value: tuple[str, str]) -> None:
        self._by_uid[uid] = value
        self._by_uid.move_to_end(uid)
        while len(self._by_uid) > self.limit:
            self._by_uid.popitem(last=False)

    def get(self, uid: str) -> tuple[str, str] | None:
        return self._by_uid.get(uid)

    def keep_only(self, live: Callable[[str], bool]) -> None:
        """Forget the pods that left the queue (bound by another scheduler, deleted)."""
        for uid in [u for u in self._by_uid if not live(u)]:
            del self._by_uid[uid]

    def __len__(self) -> int:
        return len(self._by_uid)

    def listen(self, daemon: Daemon) -> None:
        """Chain onto the daemon's callbacks; call before `daemon.run()`."""
        observer = daemon.schedule_one.observer
        if isinstance(observer, Reporter):
            before = observer.on_attempt

            def on_attempt(pod: PodInfo, reason: str, message: str) -> None:
                self.attempted(pod, reason, message)
                if before is not None:
                    before(pod, reason, message)

            observer.on_attempt = on_attempt
        queue = daemon.queue
        was_gated = queue.on_gated

        def on_gated(pod: PodInfo, status: Status) -> None:
            self.gated(pod, status)
            if was_gated is not None:
                was_gated(pod, status)

        queue.on_gated = on_gated


def map_routes(daemon: Daemon, clock: Callable[[], float] = time.monotonic) -> list[web.RouteDef]:
    """The map's routes for `serve(..., routes=...)`; starts listening for pending reasons."""
    reasons = PendingReasons()
    reasons.listen(daemon)
    cached: dict[int, tuple[float, MapData]] = {}
    fragments: Fragments = {}
    views: NodeViews = {}

    def data(request: web.Request) -> MapData:
        try:
            page = int(request.query.get("page", "0"))
        except ValueError:
            page = 0
        now = clock()
        hit = cached.get(page)
        if hit is not None and now - hit[0] < CACHE_SECONDS:
            return hit[1]
        reasons.keep_only(lambda uid: bool(daemon.queue.where(uid)))
        built = collect(daemon, reasons.get, page=page, per_page=NODES_PER_PAGE, views=views)
        cached.clear()
        cached[page] = (now, built)
        return built

    async def page(request: web.Request) -> web.Response:
        return web.Response(
            text=render_html(data(request), fragments), content_type="text/html", headers=HEADERS
        )

    async def as_json(request: web.Request) -> web.Response:
        return web.Response(
            body=to_json_bytes(data(request)), content_type="application/json", headers=HEADERS
        )

    return [web.get("/map", page), web.get("/map.json", as_json)]

"""The binding path's own cost per pod: the daemon's write and bookkeeping, no real network.

    .venv/bin/python bench/bind_path.py [--pods 2000]

What a bound pod costs the daemon's process after its scheduling cycle, against an aiohttp
server in this process (loopback, answers 201 at once, so what is timed is our side):

* `Binding write`: ClusterWriter.bind (gpusched/kube/writer.py), the one write per pod:
  the Binding body with the card annotations, the rate limiter (set wide open here), the
  kubernetes_asyncio ApiClient's request building, the HTTP round trip and the answer's
  decoding; beside it, the peer: the same body POSTed with a bare aiohttp session
  (orjson-encoded), i.e. the round trip alone. Their ratio is the client layer's weight.
* `Scheduled Event write`: ClusterWriter.event for the bound pod (spawned as a side task
  by the reporter), against the same bare-aiohttp peer.
* `post-bind bookkeeping`: Reporter.finished for a BOUND outcome (daemon/reporting.py):
  the decision record (top nodes with every plugin's score, as the daemon keeps them),
  its JSON log line (to /dev/null), the metrics, and spawning the Event task.

The two sides of each ratio alternate pod by pod in one run, so a busy machine slows both.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from kubernetes_asyncio.client import ApiClient, Configuration

from gpusched.config import builtin_profiles, config_from_dict
from gpusched.config.defaults import API_VERSION, KIND
from gpusched.core.queue import QueuedPodInfo
from gpusched.core.schedule_one import Decision, Outcome
from gpusched.daemon.reporting import Reporter
from gpusched.daemon.tasks import Tasks
from gpusched.kube.client import Kube
from gpusched.kube.writer import ClusterWriter, ObjectRef
from gpusched.model import keys
from gpusched.model.pod import PodInfo, PodRequest
from gpusched.observability.logging import make_logger
from gpusched.observability.metrics import Metrics
from gpusched.plugins import default_registry
from gpusched.sim.engine import Simulation
from gpusched.sim.generator import generate_fleet


async def _created(request: web.Request) -> web.Response:
    await request.read()
    return web.json_response({"kind": "Status", "status": "Success"}, status=201)


def a_decision(sim: Simulation, i: int) -> Decision:
    """A shared-GPU pod placed by the default profile, its scores kept as the daemon's are."""
    pod = PodInfo(
        uid=f"uid-{i}",
        namespace="team-a",
        name=f"infer-{i}",
        request=PodRequest(cpu_milli=2000, memory_bytes=8 << 30, gpu_milli=250),
        scheduler_name=keys.SCHEDULER_NAME,
    )
    return sim.submit(pod, keep_scores=True)


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter_ns()
    await fn()
    return (time.perf_counter_ns() - t0) / 1e3


def line(label: str, ours: list[float], peer: list[float] | None) -> None:
    med = statistics.median(ours)
    p90 = sorted(ours)[int(0.9 * (len(ours) - 1))]
    if peer is None:
        print(f"{label:<30}{med:>10.1f}{p90:>10.1f}")
        return
    pm = statistics.median(peer)
    print(f"{label:<30}{med:>10.1f}{p90:>10.1f}{pm:>14.1f}{med / pm:>8.2f}")


async def main(pods: int) -> None:
    app = web.Application()
    app.router.add_post("/{tail:.*}", _created)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    host = f"http://127.0.0.1:{port}"

    config = Configuration()
    config.host = host
    kube = Kube(ApiClient(config))
    writer = ClusterWriter(kube, qps=1e9, burst=10**9)
    devnull = open(os.devnull, "w")  # noqa: ASYNC230, SIM115 - /dev/null, the logger's stream
    log = make_logger(devnull)
    tasks = Tasks(log)
    registry = default_registry()
    document = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "profiles": [builtin_profiles()[keys.SCHEDULER_NAME]],
    }
    profile = config_from_dict(document, registry).profiles[0]
    sim = Simulation(generate_fleet().nodes, profile, registry)
    reporter = Reporter(
        log, Metrics(), writer, tasks, {sim.name: sim.fw}, lambda: sim.snapshot.names
    )
    session = aiohttp.ClientSession()

    bind_ours: list[float] = []
    bind_peer: list[float] = []
    event_ours: list[float] = []
    event_peer: list[float] = []
    book: list[float] = []
    for i in range(pods + 50):
        decision = a_decision(sim, i)
        pod = dataclasses.replace(decision.pod, uid=f"b-{i}", name=f"b-{i}")
        alloc = decision.alloc
        cards = ",".join(map(str, alloc.cards)) if alloc is not None else ""
        annotations = {keys.GPU_IDS: cards}
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": pod.name,
                "namespace": pod.namespace,
                "uid": pod.uid,
                "annotations": annotations,
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": decision.node},
        }
        path = f"{host}/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"

        async def raw(url: str = path, payload: object = body) -> None:
            async with session.post(
                url, data=orjson.dumps(payload), headers={"Content-Type": "application/json"}
            ) as resp:
                orjson.loads(await resp.read())

        async def ours(
            p: PodInfo = pod, node: str = decision.node, ann: dict[str, str] = annotations
        ) -> None:
            st = await writer.bind(p, node, ann)
            assert st.is_success(), st

        async def event(p: PodInfo = pod, node: str = decision.node) -> None:
            await writer.event(
                ObjectRef.pod(p), "Normal", "Scheduled", f"Successfully assigned to {node}"
            )

        event_url = f"{host}/api/v1/namespaces/{pod.namespace}/events"
        first = (raw, ours) if i % 2 else (ours, raw)
        times = [await timed(f) for f in first]
        b_ours, b_peer = (times[1], times[0]) if i % 2 else (times[0], times[1])
        e_ours = await timed(event)
        e_peer = await timed(lambda u=event_url: raw(u, {"kind": "Event"}))
        info = QueuedPodInfo(pod, added=time.perf_counter())
        t0 = time.perf_counter_ns()
        reporter.finished(info, decision, Outcome.BOUND, f"bound to {decision.node}", None)
        t_book = (time.perf_counter_ns() - t0) / 1e3
        # The Event task the reporter spawned: let it finish outside the timed part.
        await asyncio.gather(*tasks.side)
        sim.delete(decision.pod.uid)
        if i >= 50:  # the first ones warm the connection pools and the JIT
            bind_ours.append(b_ours)
            bind_peer.append(b_peer)
            event_ours.append(e_ours)
            event_peer.append(e_peer)
            book.append(t_book)

    print(f"binding path per pod, {pods} pods, in-process aiohttp server on loopback")
    print(f"{'us per pod':<30}{'median':>10}{'p90':>10}{'bare aiohttp':>14}{'ratio':>8}")
    line("Binding write (writer.bind)", bind_ours, bind_peer)
    line("Scheduled Event write", event_ours, event_peer)
    line("post-bind bookkeeping", book, None)
    await session.close()
    await kube.close()
    await runner.cleanup()
    devnull.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pods", type=int, default=2000)
    asyncio.run(main(ap.parse_args().pods))

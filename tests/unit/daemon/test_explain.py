"""The explain endpoint's and command's answers that need no cluster: which pods are
refused and how, how a target is read, and the same JSON computed from Facts."""

from __future__ import annotations

import asyncio
import io
import threading
import time
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gpusched.config import default_config
from gpusched.daemon import Daemon, DaemonOptions
from gpusched.daemon import explain as explain_mod
from gpusched.daemon.explain import (
    ROUTE,
    SEARCH_SECONDS,
    ExplainEndpoint,
    compute,
    facts_of,
    in_daemon_thread,
    refuse,
)
from gpusched.daemon.explain_cli import _from_endpoint, split_target
from gpusched.daemon.main import Pages, RunArgs, pages, run_main
from gpusched.devcluster.nodes import NodeSpec, node_object
from gpusched.devcluster.testkit import pod_manifest
from gpusched.explain import Facts
from gpusched.explain.render import human
from gpusched.framework.interfaces import Allocation
from gpusched.model import keys
from gpusched.model.dra import (
    device_class_from_k8s,
    resource_claim_from_k8s,
    resource_slice_from_k8s,
)
from gpusched.observability.logging import make_logger
from gpusched.observability.metrics import Metrics, serve
from gpusched.plugins import default_registry
from tests.builders import watch_line
from tests.dra_builders import gpu_allocation, gpu_claim, gpu_class, gpu_slice
from tests.unit.explain.support import REGISTRY, facts, node, pod


def test_a_bound_pod_is_refused_naming_its_node_and_cards() -> None:
    bound = pod("done", 2, node_name="gpu-1", cards="3,4")
    status, body = refuse(bound, "team/done", {keys.SCHEDULER_NAME})
    assert status == 409 and body["reason"] == "AlreadyBound"
    assert body["node"] == "gpu-1" and body["cards"] == "3,4"
    assert "bound to node gpu-1 on cards 3,4" in body["error"]


def test_missing_and_foreign_pods_are_refused() -> None:
    assert refuse(None, "team/x", {keys.SCHEDULER_NAME}) == (
        404,
        {"error": "pod team/x not found", "reason": "NotFound"},
    )
    other = pod("x", 1, scheduler_name="default-scheduler")
    status, body = refuse(other, "team/x", {keys.SCHEDULER_NAME})
    assert status == 422 and "'default-scheduler', not this one" in body["error"]
    assert refuse(pod("y", 1), "team/y", {keys.SCHEDULER_NAME}) is None


def test_compute_finds_the_pod_in_the_facts_and_explains_it() -> None:
    want = pod("want", 9)  # more cards than any node has
    status, body = compute(facts([node("a")], [want]), REGISTRY, "team", "want")
    assert status == 200 and body["binding"] == "resources" and body["changes"] == []
    assert "no single change found" in body["notes"][-1]
    text = human(body)
    assert "binding constraint: resources" in text and "Insufficient nvidia.com/gpu" in text
    assert compute(facts([node("a")], [want]), REGISTRY, "team", "nope")[0] == 404


def test_targets() -> None:
    assert split_target("ns/pod", "") == ("ns", "pod")
    assert split_target("pod", "ns") == ("ns", "pod")
    assert split_target("pod", "") == ("default", "pod")
    assert split_target("a/b/c", "") is None
    assert split_target("a/b", "other") is None


def test_a_pod_being_bound_is_refused_naming_its_node() -> None:
    want = pod("want", 2)
    f = facts([node("a")], [want])
    f.assumed = [(want, Allocation("a", 0, (0, 1), (1000, 1000), (0, 0)))]
    status, body = compute(f, REGISTRY, "team", "want")
    assert status == 409 and body["reason"] == "BeingBound"
    assert body["node"] == "a" and body["cards"] == "0,1"


# -- the endpoint on a daemon (no API server: the watches fed by hand) ----------------------

GUARD = 30.0  # against a hang; every wait below is on an event
DRA_READS = (
    "device_class",
    "slices",
    "pools",
    "slices_for_node",
    "claim",
    "allocated_claims",
    "allocating",
)
VOLUME_READS = ("claim", "volume", "volumes_of_class", "storage_class", "csi_node")


def _daemon() -> Daemon:
    registry = default_registry()
    d = Daemon(
        None,  # type: ignore[arg-type]
        default_config(registry),
        registry,
        make_logger(io.StringIO()),
        options=DaemonOptions(warm_up=False, pod_groups=False),
    )
    raw = node_object(NodeSpec("n1", 8, "A100M80", 96_000, 1_048_576, "r", "s", 8))
    raw["metadata"]["uid"] = "node-n1"
    d.node_watch._line(watch_line("ADDED", raw))
    return d


def _add_pod(
    d: Daemon, name: str, gpus: int, *, node: str = "", cards: str = "", **kw: Any
) -> None:
    raw = pod_manifest(name, gpus=gpus, **kw)
    raw["metadata"].update(namespace="ns", uid=f"uid-{name}", resourceVersion="1")
    if node:
        raw["spec"]["nodeName"] = node
        raw["status"] = {"phase": "Running"}
        raw["metadata"]["annotations"][keys.GPU_IDS] = cards
    d.pod_watch._line(watch_line("ADDED", raw))


def _record_reads(port: object, names: tuple[str, ...], reads: list[tuple[str, int]]) -> None:
    for name in names:
        inner = getattr(port, name)

        def read(*args: Any, _inner: Any = inner, _name: str = name) -> Any:
            reads.append((_name, threading.get_ident()))
            return _inner(*args)

        setattr(port, name, read)


async def test_the_search_reads_copies_while_the_live_views_change() -> None:
    """facts_of copies the DRA, volume and PodDisruptionBudget views on the event loop;
    the search (in another thread) reads only the copies. It is paused mid-search while a
    claim is allocated in the live view (as the watch would, on the loop): the live view's
    reads and caches stay right, and the copy does not move."""
    d = _daemon()
    _add_pod(d, "held", 6, node="n1", cards="0,1,2,3,4,5")
    _add_pod(d, "want", 4)
    dra = d.dra
    assert dra is not None and d.volumes is not None and d.disruption is not None
    dra.put_class(device_class_from_k8s(gpu_class()))
    dra.put_slice(resource_slice_from_k8s(gpu_slice("dra-node")))
    first = resource_claim_from_k8s(gpu_claim("c1", allocation=gpu_allocation("dra-node", 0)))
    dra.put_claim(first)
    assert dra.allocated_claims() == (first,)

    facts = facts_of(d)
    assert facts.dra is not dra and facts.volumes is not d.volumes
    assert facts.disruption is not d.disruption
    reads: list[tuple[str, int]] = []
    _record_reads(dra, DRA_READS, reads)
    _record_reads(d.volumes, VOLUME_READS, reads)
    _record_reads(d.disruption, ("budgets_of",), reads)

    paused, resume = threading.Event(), threading.Event()

    def stop() -> bool:  # called by the search between dry cycles, in its thread
        if not paused.is_set():
            paused.set()
            assert resume.wait(GUARD)
        return False

    search = asyncio.ensure_future(
        asyncio.to_thread(compute, facts, d.registry, "ns", "want", stop=stop)
    )
    assert await asyncio.to_thread(paused.wait, GUARD)
    second = resource_claim_from_k8s(gpu_claim("c2", allocation=gpu_allocation("dra-node", 1)))
    dra.put_claim(second)
    assert [c.name for c in dra.allocated_claims()] == ["c1", "c2"]
    resume.set()
    status, body = await search

    assert status == 200 and body["binding"] == "resources", body
    worker = [r for r in reads if r[1] != threading.get_ident()]
    assert worker == []  # not one read of a live view from the search's thread
    assert dra._allocated_at == (dra.version, dra.allocated_claims())
    assert [c.name for c in dra.allocated_claims()] == ["c1", "c2"]
    assert facts.dra.allocated_claims() == (first,)  # the copy stays at its instant


async def _get(port: int, path: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}{path}") as r:
        return r.status, await r.json(), dict(r.headers)


async def _served(d: Daemon, args: RunArgs) -> tuple[web.AppRunner, int, Pages]:
    served = pages(d, args)
    runner = await serve(Metrics(), 0, lambda: True, routes=served.routes, host="127.0.0.1")
    return runner, runner.addresses[0][1], served


async def test_the_endpoint_refuses_before_copying_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d = _daemon()
    d.ready.set()
    _add_pod(d, "bound", 2, node="n1", cards="0,1")
    _add_pod(d, "theirs", 1, scheduler_name="default-scheduler")
    _add_pod(d, "placed", 1)
    placed = next(p for _, p in d.pod_watch.store.values() if p.name == "placed")
    d.cache.assume(placed, Allocation("n1", 0, (2,), (1000,), (0,)))

    def no_copy(_: Daemon) -> Facts:
        raise AssertionError("facts_of must not run for a refused pod")

    monkeypatch.setattr(explain_mod, "facts_of", no_copy)
    runner, port, _ = await _served(d, RunArgs(explain_endpoint=True))
    try:
        answers = {
            name: await _get(port, f"/explain/ns/{name}")
            for name in ("nope", "bound", "theirs", "placed")
        }
    finally:
        await runner.cleanup()
    assert {k: (s, b["reason"]) for k, (s, b, _) in answers.items()} == {
        "nope": (404, "NotFound"),
        "bound": (409, "AlreadyBound"),
        "theirs": (422, "NotOurs"),
        "placed": (409, "BeingBound"),
    }


async def test_one_search_at_a_time_the_next_request_gets_429(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d = _daemon()
    d.ready.set()
    _add_pod(d, "want", 9)
    started, release = threading.Event(), threading.Event()
    seen: list[tuple[float | None, bool]] = []

    def blocking(facts: Facts, registry: Any, ns: str, name: str, **kw: Any) -> Any:
        started.set()
        assert release.wait(GUARD)
        seen.append((kw["deadline"], kw["stop"]()))
        return 200, {"pod": f"{ns}/{name}"}

    monkeypatch.setattr(explain_mod, "compute", blocking)
    served = pages(d, RunArgs(explain_endpoint=True))
    runner = await serve(Metrics(), 0, lambda: True, routes=served.routes, host="127.0.0.1")
    port = runner.addresses[0][1]
    try:
        first = asyncio.ensure_future(_get(port, "/explain/ns/want"))
        assert await asyncio.to_thread(started.wait, GUARD)
        status, body, headers = await _get(port, "/explain/ns/want")
        assert status == 429 and body["reason"] == "Busy", body
        assert 1 <= int(headers["Retry-After"]) <= SEARCH_SECONDS
        release.set()
        assert (await first)[:2] == (200, {"pod": "ns/want"})
        # The search's thread has ended: the next request is served again.
        assert (await _get(port, "/explain/ns/want"))[0] == 200
    finally:
        await runner.cleanup()
    assert [stopped for _, stopped in seen] == [False, False]
    assert all(deadline is not None for deadline, _ in seen)


async def test_closing_the_endpoint_stops_a_running_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d = _daemon()
    d.ready.set()
    _add_pod(d, "want", 9)
    endpoint = ExplainEndpoint(d, search_seconds=20.0, clock=lambda: 100.0)
    started = threading.Event()

    def searching(facts: Facts, registry: Any, ns: str, name: str, **kw: Any) -> Any:
        started.set()
        assert endpoint.closing.wait(GUARD)
        return 200, {"deadline": kw["deadline"], "stopped": kw["stop"]()}

    monkeypatch.setattr(explain_mod, "compute", searching)
    runner = await serve(Metrics(), 0, lambda: True, routes=endpoint.routes(), host="127.0.0.1")
    port = runner.addresses[0][1]
    try:
        answer = asyncio.ensure_future(_get(port, "/explain/ns/want"))
        assert await asyncio.to_thread(started.wait, GUARD)
        endpoint.close()  # what `gpusched run` does on its way out
        status, body, _ = await answer
    finally:
        await runner.cleanup()
    assert (status, body) == (200, {"deadline": 120.0, "stopped": True})


async def test_a_cancelled_wait_stops_the_search_in_its_daemon_thread() -> None:
    started, go = threading.Event(), threading.Event()
    seen: dict[str, bool] = {}
    ended = asyncio.Event()

    def work(stopped: Any) -> int:
        seen["daemon"] = threading.current_thread().daemon
        started.set()
        assert go.wait(GUARD)
        seen["stopped"] = stopped()
        return 1

    task = asyncio.ensure_future(in_daemon_thread(work, name="t", done=ended.set))
    assert await asyncio.to_thread(started.wait, GUARD)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    go.set()
    await asyncio.wait_for(ended.wait(), GUARD)
    # Nothing joins a daemon thread at exit; a cancelled wait tells the search to stop.
    assert seen == {"daemon": True, "stopped": True}


async def test_without_the_flag_there_is_no_route_and_the_command_says_why() -> None:
    d = _daemon()
    assert pages(d, RunArgs()).routes == []
    assert [r.path for r in pages(d, RunArgs(explain_endpoint=True)).routes] == [ROUTE]  # type: ignore[attr-defined]
    runner, port, _ = await _served(d, RunArgs())
    try:
        status, body = await _from_endpoint(f"http://127.0.0.1:{port}", "ns", "want")
    finally:
        await runner.cleanup()
    assert status == 404 and body["reason"] == "NoEndpoint"
    assert "without --explain-endpoint" in body["error"]


def test_the_flag_needs_the_metrics_port() -> None:
    assert run_main(RunArgs(explain_endpoint=True, metrics_port=0)) == 2


async def test_a_client_that_goes_away_stops_its_search(monkeypatch: pytest.MonkeyPatch) -> None:
    d = _daemon()
    d.ready.set()
    _add_pod(d, "want", 9)
    started, stopped = threading.Event(), threading.Event()

    def searching(facts: Facts, registry: Any, ns: str, name: str, **kw: Any) -> Any:
        started.set()
        give_up = time.monotonic() + GUARD
        while not kw["stop"]():  # what the search checks between its dry cycles
            assert time.monotonic() < give_up, "the search was never told to stop"
            started.wait(0.005)
        stopped.set()
        return 200, {}

    monkeypatch.setattr(explain_mod, "compute", searching)
    runner, port, served = await _served(d, RunArgs(explain_endpoint=True))
    try:
        session = aiohttp.ClientSession()
        request = asyncio.ensure_future(session.get(f"http://127.0.0.1:{port}/explain/ns/want"))
        assert await asyncio.to_thread(started.wait, GUARD)
        request.cancel()
        await session.close()  # the connection goes: the server cancels the handler
        assert await asyncio.to_thread(stopped.wait, GUARD)
    finally:
        served.close()
        await runner.cleanup()

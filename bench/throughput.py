"""End-to-end scheduling throughput: kube-scheduler v1.36.3 against `gpusched run` on the
local control plane (`make bench-cluster`; docs/performance-cluster.md).

    .venv/bin/python bench/throughput.py [--nodes 1000] [--pods 2000] [--paced-pods 2000]
        [--rate 200] [--scenarios backlog-single,backlog-mixed,paced] [--schedulers kube,gpusched]
        [--quick] [--profile] [--base-tree DIR] [--out DIR]

For each scenario and each scheduler, one after the other, a fresh cluster (etcd,
kube-apiserver, KWOK; gpusched.devcluster.LocalCluster, no controller manager) with the
same N KWOK nodes of 8 GPUs each, then:

* backlog-single: --pods single-GPU pods created before the scheduler starts;
* backlog-mixed: --pods pods created before the scheduler starts, 40 % one card, 10 % whole
  2/4/8 cards, 25 % a shared half card (gpusched: the gpusched.io/gpu-milli annotation;
  kube-scheduler cannot share a card, so the closest it can express is a whole card,
  nvidia.com/gpu: 1), 25 % CPU-only;
* paced: the scheduler first (a warm-up pod bound), then --paced-pods single-GPU pods
  created at --rate pods/s while it runs.

kube-scheduler: a KubeSchedulerConfiguration with percentageOfNodesToScore 100,
NodeResourcesFit MostAllocated with nvidia.com/gpu weighted 10 (cpu, memory 1), client
qps/burst --qps/--burst. gpusched: `gpusched run`, the default profile (every plugin), the
same client qps/burst, leader election off (one instance).

What is measured, by a neutral observer (this process's own client and watch of the pods,
never a scheduler's log):

* throughput as scheduler_perf does it: the count of bound pods sampled every second from
  the scheduler's start; per-second deltas from the first second with a bind on, that
  first second skipped (start-up) and the last, partial one too; mean, p50, p90, p99;
* create->bind latency: from the moment the creator's POST returned (creationTimestamp has
  1 s resolution) to the observer's first sight of spec.nodeName. For a backlog every pod
  waits for the scheduler's start, so its latency is counted from the first bind instead
  (max(created, first bind)): the time the scheduler took to reach it;
* CPU seconds (utime+stime of /proc/<pid>/stat) of the scheduler, kube-apiserver, etcd,
  KWOK and this process between the sample before the first bind and the last bind: the
  machine's cores are shared by all of them, which explains ratios.

--base-tree DIR adds a third scheduler, "base": `gpusched run` from another checkout of
the repository (e.g. a worktree of the commit before a change), run in turn with the two
others on its own fresh cluster: before/after numbers from one run.

--profile: py-spy samples the gpusched process (`py-spy record --format raw`) and the
hottest frames are printed (self and inclusive share). Every number is from this one run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from contextlib import aclosing
from pathlib import Path

import numpy as np

from gpusched.devcluster import LocalCluster
from gpusched.devcluster.bootstrap import install_crds, wait_nodes_ready
from gpusched.devcluster.cluster import APISERVER, ClusterOptions
from gpusched.devcluster.configs import BASELINE_SCHEDULER
from gpusched.devcluster.differential import PAUSE_IMAGE
from gpusched.devcluster.nodes import NodeSpec, node_objects
from gpusched.devcluster.testkit import daemon_argv
from gpusched.kube import JSON, Kube, create_namespace, create_nodes, pod_path
from gpusched.model import keys

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "bench"
WARM_NAMESPACE = "bench-warm"

SCENARIOS = ("backlog-single", "backlog-mixed", "paced")
SCHEDULERS = ("kube", "gpusched", "base")
LABEL = {"kube": "kube-scheduler", "gpusched": "gpusched", "base": "gpusched@base"}
CREATE_CONCURRENCY = 32
# Paced creation: POSTs in flight at once. A loaded API server answers a pod create in
# hundreds of milliseconds, so 200 pods/s needs about a hundred in flight.
PACED_CONCURRENCY = 128


def _log(message: str) -> None:
    print(f"bench-cluster: {message}", file=sys.stderr, flush=True)


# -- the workload ---------------------------------------------------------------------------


def fleet(count: int) -> list[JSON]:
    """`count` KWOK nodes of 8 A100-80GB each (one NVLink island), 8 to a rack."""
    specs = [
        NodeSpec(
            name=f"node-{i:05d}",
            gpus=8,
            model="A100M80",
            cpu_milli=96_000,
            memory_mib=1_048_576,
            rack=f"rack-{i // 8:04d}",
            spine=f"spine-{i // 32:03d}",
            nvlink_island_size=8,
        )
        for i in range(count)
    ]
    return list(node_objects(specs))


@dataclasses.dataclass(frozen=True)
class PodShape:
    kind: str  # gpu1, gpuN, shared, cpu
    cards: int = 0
    milli: int = 0

    def gpus(self, scheduler: str) -> int:
        """Whole cards the pod takes from kube-scheduler's nvidia.com/gpu count."""
        if self.kind == "shared":
            return 1 if scheduler == "kube" else 0
        return self.cards


def shapes(scenario: str, count: int, seed: int) -> list[PodShape]:
    if scenario != "backlog-mixed":
        return [PodShape("gpu1", cards=1)] * count
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        r = rng.random()
        if r < 0.40:
            out.append(PodShape("gpu1", cards=1))
        elif r < 0.50:
            out.append(PodShape("gpuN", cards=rng.choice((2, 4, 8))))
        elif r < 0.75:
            out.append(PodShape("shared", milli=500))
        else:
            out.append(PodShape("cpu"))
    return out


def pod_object(name: str, shape: PodShape, scheduler: str, namespace: str = NAMESPACE) -> JSON:
    requests = {"cpu": "500m", "memory": "1Gi"}
    resources: JSON = {"requests": requests}
    annotations: dict[str, str] = {}
    cards = shape.gpus(scheduler)
    if cards:
        resources["limits"] = {keys.GPU_RESOURCE: str(cards)}
    elif shape.kind == "shared":
        annotations[keys.GPU_MILLI] = str(shape.milli)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"bench.gpusched.io/kind": shape.kind},
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": BASELINE_SCHEDULER if scheduler == "kube" else keys.SCHEDULER_NAME,
            "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": resources}],
            "terminationGracePeriodSeconds": 0,
        },
    }


# -- the observer ---------------------------------------------------------------------------


class Observer:
    """The namespace's pods through one list+watch of this process's own client: when each
    was first seen (ADDED) and first seen bound (spec.nodeName)."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.added: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.nodes: dict[str, str] = {}
        self.changed = asyncio.Event()

    def _see(self, obj: JSON, now: float) -> None:
        name = obj["metadata"]["name"]
        self.added.setdefault(name, now)
        node = (obj.get("spec") or {}).get("nodeName")
        if node and name not in self.bound:
            self.bound[name] = now
            self.nodes[name] = node
        self.changed.set()

    async def run(self) -> None:
        path = pod_path(self.namespace)
        version = ""
        while True:
            if not version:
                listing = await self.kube.get(path)
                now = time.monotonic()
                for obj in listing.get("items", []):
                    self._see(obj, now)
                version = str(listing["metadata"]["resourceVersion"])
            events = self.kube.watch(path, resource_version=version, timeout_seconds=3600)
            async with aclosing(events):
                async for event in events:
                    if event.type == "ERROR":
                        version = ""  # 410 Gone: list again
                        break
                    meta = event.object.get("metadata") or {}
                    version = str(meta.get("resourceVersion") or version)
                    if event.type in ("ADDED", "MODIFIED"):
                        self._see(event.object, time.monotonic())

    async def wait(self, done: Callable[[], bool], timeout: float, what: str) -> None:  # noqa: ASYNC109
        deadline = time.monotonic() + timeout
        while not done():
            # No await between the check and clear(): no event can slip in unseen.
            self.changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{what}: not done after {timeout:.0f}s")
            await asyncio.wait_for(self.changed.wait(), left)


# -- CPU accounting -------------------------------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` (fields 14 and 15 of /proc/<pid>/stat); 0 once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


@dataclasses.dataclass
class Sample:
    t: float
    bound: int
    cpu: dict[str, float]


# -- one run --------------------------------------------------------------------------------


@dataclasses.dataclass
class RunResult:
    scenario: str
    scheduler: str
    pods: int
    bound: int
    throughput: list[float]  # per-second samples (scheduler_perf's)
    overall: float  # (bound - 1) / (last bind - first bind)
    latency: list[float]  # seconds, one per bound pod
    cpu: dict[str, float]  # process -> CPU seconds over the binding window
    seconds: float  # first bind to last bind
    create_rate: float  # pods/s the creator achieved (paced)
    profile: str = ""
    note: str = ""


@dataclasses.dataclass
class Settings:
    nodes: int
    pods: int
    paced_pods: int
    rate: float
    qps: int
    burst: int
    seed: int
    profile: bool
    out: Path
    timeout: float
    base_tree: Path | None = None


async def _create_all(kube: Kube, objs: list[JSON], created: dict[str, float]) -> None:
    sem = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def one(obj: JSON) -> None:
        async with sem:
            await kube.post(pod_path(obj["metadata"]["namespace"]), obj)
            created[obj["metadata"]["name"]] = time.monotonic()

    async with asyncio.TaskGroup() as group:
        for obj in objs:
            group.create_task(one(obj))


async def _create_paced(
    kube: Kube, objs: list[JSON], rate: float, created: dict[str, float]
) -> float:
    """POST one pod every 1/rate seconds (at most PACED_CONCURRENCY in flight); the rate
    achieved."""
    sem = asyncio.Semaphore(PACED_CONCURRENCY)
    t0 = time.monotonic()

    async def one(obj: JSON) -> None:
        try:
            await kube.post(pod_path(obj["metadata"]["namespace"]), obj)
            created[obj["metadata"]["name"]] = time.monotonic()
        finally:
            sem.release()

    async with asyncio.TaskGroup() as group:
        for i, obj in enumerate(objs):
            # The pacing clock: a timer, not synchronisation (nothing is awaited on it).
            delay = t0 + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await sem.acquire()
            group.create_task(one(obj))
    return len(objs) / max(time.monotonic() - t0, 1e-9)


def _start_py_spy(out: Path, pid: int) -> subprocess.Popen[bytes] | None:
    """`py-spy record` of `pid` into `out` (collapsed stacks) until the process exits; None
    when py-spy is not installed (the dev extras have it)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        _log("py-spy not found: no profile (pip install -e '.[dev]')")
        return None
    argv = [spy, "record", "--format", "raw", "--rate", "100", "--nonblocking"]
    return subprocess.Popen(
        [*argv, "-o", str(out), "--pid", str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


class Scheduler:
    """One of the two schedulers as a process of its own."""

    def __init__(self, which: str, cluster: LocalCluster, s: Settings, tag: str) -> None:
        self.which = which
        self.cluster = cluster
        self.s = s
        self.tag = tag
        self.pid = -1
        self._daemon: asyncio.subprocess.Process | None = None
        self._spy: subprocess.Popen[bytes] | None = None
        self.profile_path = s.out / f"{tag}-py-spy.txt"

    async def start(self) -> None:
        if self.which == "kube":
            process = await asyncio.to_thread(
                self.cluster.start_kube_scheduler, qps=self.s.qps, burst=self.s.burst
            )
            self.pid = process.pid
            return
        config = self.s.out / f"{self.tag}-gpusched.yaml"
        config.write_text(
            "apiVersion: gpusched.io/v1alpha1\nkind: GpuSchedulerConfiguration\n"
            f"clientConnection:\n  qps: {self.s.qps}\n  burst: {self.s.burst}\n"
        )
        log = self.s.out / f"{self.tag}-gpusched.log"
        # `python -m` imports the package from its working directory first: the base
        # scheduler runs the other checkout's code with this interpreter.
        tree = self.s.base_tree if self.which == "base" and self.s.base_tree else ROOT
        with log.open("wb") as handle:
            self._daemon = await asyncio.create_subprocess_exec(
                *daemon_argv(self.cluster.kubeconfig, config),
                stdout=handle,
                stderr=subprocess.STDOUT,
                cwd=tree,
                env={**os.environ, "PYTHONPATH": str(tree)},
            )
        self.pid = self._daemon.pid
        if self.s.profile:
            self._spy = _start_py_spy(self.profile_path, self.pid)

    def alive(self) -> bool:
        return self._daemon is None or self._daemon.returncode is None

    async def exited(self, observer: Observer) -> None:
        """Wake the observer's waiters when the daemon exits (no pod event would)."""
        if self._daemon is not None:
            await self._daemon.wait()
            observer.changed.set()

    async def stop(self) -> None:
        daemon = self._daemon
        if daemon is not None and daemon.returncode is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(daemon.wait(), 60)
            except TimeoutError:
                daemon.kill()
                await daemon.wait()
        if self._spy is not None:
            # py-spy writes its file when the process it samples exits.
            try:
                await asyncio.to_thread(self._spy.wait, 60)
            except subprocess.TimeoutExpired:
                self._spy.send_signal(signal.SIGINT)
                await asyncio.to_thread(self._spy.wait, 30)
        # kube-scheduler stops with its cluster.


async def _sampler(
    observer: Observer, pids: dict[str, int], samples: list[Sample], total: int
) -> None:
    t0 = time.monotonic()
    k = 0
    while True:
        cpu = {n: cpu_seconds(p) for n, p in pids.items()}
        samples.append(Sample(time.monotonic(), len(observer.bound), cpu))
        if len(observer.bound) >= total:
            return
        k += 1
        # scheduler_perf's 1 s sampling clock: a timer, not synchronisation.
        await asyncio.sleep(max(0.0, t0 + k - time.monotonic()))


async def run_one(cluster: LocalCluster, scenario: str, which: str, s: Settings) -> RunResult:
    tag = f"{scenario}-{which}"
    count = s.paced_pods if scenario == "paced" else s.pods
    pod_shapes = shapes(scenario, count, s.seed)
    objs = [pod_object(f"p{i:05d}", sh, which) for i, sh in enumerate(pod_shapes)]
    created: dict[str, float] = {}
    async with await Kube.connect(cluster.kubeconfig) as kube:
        t0 = time.monotonic()
        # The daemon watches PodGroups and ElasticQuotas, as on any cluster it runs on.
        await install_crds(kube, cluster.crd_dir)
        nodes = fleet(s.nodes)
        await create_nodes(kube, nodes, concurrency=CREATE_CONCURRENCY)
        await wait_nodes_ready(kube, [n["metadata"]["name"] for n in nodes], timeout=900)
        await create_namespace(kube, NAMESPACE, wait_service_account=False)
        await create_namespace(kube, WARM_NAMESPACE, wait_service_account=False)
        _log(f"{tag}: {s.nodes} nodes Ready in {time.monotonic() - t0:.0f}s")
        observer = Observer(kube, NAMESPACE)
        watcher = asyncio.create_task(observer.run())
        sched = Scheduler(which, cluster, s, tag)
        pids = {p.name: p.pid for p in cluster.processes if p.name in (APISERVER, "etcd", "kwok")}
        pids["bench"] = os.getpid()
        samples: list[Sample] = []
        create_rate = 0.0
        note = ""
        try:
            if scenario != "paced":
                t1 = time.monotonic()
                await _create_all(kube, objs, created)
                await observer.wait(lambda: len(observer.added) >= count, 120, "backlog seen")
                _log(f"{tag}: {count} pods created in {time.monotonic() - t1:.0f}s")
                await sched.start()
                pids["scheduler"] = sched.pid
                sampler = asyncio.create_task(_sampler(observer, pids, samples, count))
            else:
                await sched.start()
                pids["scheduler"] = sched.pid
                # Ready: a warm-up pod (another namespace, not measured) bound.
                warm = Observer(kube, WARM_NAMESPACE)
                warm_task = asyncio.create_task(warm.run())
                await kube.post(
                    pod_path(WARM_NAMESPACE),
                    pod_object("warm-up", PodShape("gpu1", cards=1), which, WARM_NAMESPACE),
                )
                await warm.wait(lambda: bool(warm.bound), s.timeout, f"{tag}: warm-up pod")
                warm_task.cancel()
                sampler = asyncio.create_task(_sampler(observer, pids, samples, count))
                create_rate = await _create_paced(kube, objs, s.rate, created)
            exit_watch = asyncio.create_task(sched.exited(observer))
            await observer.wait(
                lambda: len(observer.bound) >= count or not sched.alive() or sampler.done(),
                s.timeout,
                f"{tag}: every pod bound ({len(observer.bound)}/{count} so far)",
            )
            if not sched.alive():
                # Reported in the table (how far it got), not raised: a base tree that
                # fails under the load is a result too.
                note = f"exited after {len(observer.bound)}/{count} bound; see {s.out}"
                _log(f"{tag}: the scheduler {note}")
                sampler.cancel()
            else:
                await sampler
            exit_watch.cancel()
        finally:
            watcher.cancel()
            await sched.stop()
    result = _result(scenario, which, count, observer, created, samples, create_rate, sched)
    result.note = note
    return result


def _result(
    scenario: str,
    which: str,
    count: int,
    observer: Observer,
    created: dict[str, float],
    samples: list[Sample],
    create_rate: float,
    sched: Scheduler,
) -> RunResult:
    bound_times = sorted(observer.bound.values())
    first, last = bound_times[0], bound_times[-1]
    counts = [x.bound for x in samples]
    deltas = [b - a for a, b in itertools.pairwise(counts)]
    start = next((i for i, d in enumerate(deltas) if d > 0), len(deltas))
    # The first second with a bind holds start-up, the last one is partial: both skipped.
    throughput = [float(d) for d in deltas[start + 1 : -1]]
    latency = []
    for name, when in observer.bound.items():
        made = created.get(name, observer.added.get(name, when))
        if scenario != "paced":
            made = max(made, first)
        latency.append(when - made)
    before = samples[max(start, 0)].cpu if samples else {}
    after = samples[-1].cpu if samples else {}
    cpu = {n: after.get(n, 0.0) - before.get(n, 0.0) for n in after}
    return RunResult(
        scenario=scenario,
        scheduler=which,
        pods=count,
        bound=len(bound_times),
        throughput=throughput,
        overall=(len(bound_times) - 1) / max(last - first, 1e-9),
        latency=latency,
        cpu=cpu,
        seconds=last - first,
        create_rate=create_rate,
        profile=str(sched.profile_path) if sched.profile_path.exists() else "",
    )


# -- reporting ------------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def _f(x: float, spec: str) -> str:
    """``x`` formatted, or "-" when it is NaN: a run shorter than three seconds has no
    whole-second sample between the skipped first and last ones."""
    return "-" if math.isnan(x) else format(x, spec)


def table(scenario: str, results: dict[str, RunResult], s: Settings) -> str:
    lines = []
    any_result = next(iter(results.values()))
    what = (
        f"{any_result.pods} pods at {s.rate:.0f}/s"
        if scenario == "paced"
        else f"{any_result.pods} pods created before the scheduler starts"
    )
    lines.append(f"\n== {scenario}: {s.nodes} nodes x 8 GPUs, {what}")
    head = (
        f"{'scheduler':16}{'bound':>7}{'thr mean':>10}{'p50':>7}{'p90':>7}{'p99':>7}"
        f"{'overall':>9}{'lat p50':>9}{'lat p99':>9}{'sched cpu':>11}{'apisrv':>8}"
        f"{'etcd':>7}{'kwok':>7}{'bench':>7}{'secs':>7}"
    )
    lines.append(head)
    for which, r in results.items():
        lines.append(
            f"{LABEL[which]:16}{r.bound:>7}{_f(_mean(r.throughput), '.1f'):>10}"
            f"{_f(_pct(r.throughput, 50), '.0f'):>7}{_f(_pct(r.throughput, 90), '.0f'):>7}"
            f"{_f(_pct(r.throughput, 99), '.0f'):>7}{r.overall:>9.1f}"
            f"{_pct(r.latency, 50) * 1000:>7.0f}ms{_pct(r.latency, 99) * 1000:>7.0f}ms"
            f"{r.cpu.get('scheduler', 0):>10.1f}s{r.cpu.get(APISERVER, 0):>7.1f}s"
            f"{r.cpu.get('etcd', 0):>6.1f}s{r.cpu.get('kwok', 0):>6.1f}s"
            f"{r.cpu.get('bench', 0):>6.1f}s{r.seconds:>7.1f}"
        )
        if r.note:
            lines.append(f"  {LABEL[which]}: {r.note}")
    if "base" in results and "gpusched" in results:
        b, g = results["base"], results["gpusched"]
        lines.append(
            "gpusched / gpusched@base: throughput"
            f" {_f(_mean(g.throughput) / _mean(b.throughput), '.2f')}x"
            f" (mean of samples), {g.overall / b.overall:.2f}x (overall);"
            f" p99 latency {_pct(g.latency, 99) / _pct(b.latency, 99):.2f}x"
        )
    if "kube" in results and "gpusched" in results:
        k, g = results["kube"], results["gpusched"]
        ratio = _mean(g.throughput) / _mean(k.throughput) if k.throughput else float("nan")
        lat = _pct(g.latency, 99) / _pct(k.latency, 99)
        cpu = g.cpu.get("scheduler", 0) / max(k.cpu.get("scheduler", 0), 1e-9)
        lines.append(
            f"gpusched / kube-scheduler: throughput {_f(ratio, '.2f')}x (mean of samples),"
            f" {g.overall / k.overall:.2f}x (overall); p99 latency {lat:.2f}x"
            f"; scheduler CPU {cpu:.2f}x"
        )
    if scenario == "paced":
        rates = ", ".join(f"{LABEL[w]} {r.create_rate:.0f}/s" for w, r in results.items())
        lines.append(f"creation rate achieved: {rates}")
    return "\n".join(lines)


def profile_summary(path: Path, top: int = 25) -> str:
    """The hottest frames of a py-spy raw (collapsed) profile: self and inclusive shares of
    the samples in which the process was running (idle frames are not sampled)."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        count = int(n)
        total += count
        frames = stack.split(";")
        own[_short(frames[-1])] += count
        for f in {_short(f) for f in frames}:
            inclusive[f] += count
    if not total:
        return f"{path}: no samples"
    out = [f"py-spy {path.name}: {total} samples"]
    out.append("  self:")
    out += [f"    {100 * c / total:5.1f}%  {f}" for f, c in own.most_common(top)]
    out.append("  inclusive:")
    out += [f"    {100 * c / total:5.1f}%  {f}" for f, c in inclusive.most_common(top)]
    return "\n".join(out)


def _short(frame: str) -> str:
    # "func (path/to/module.py:123)" -> "func (module.py)": lines merged per function.
    name, _, where = frame.partition(" (")
    file = where.rsplit(":", 1)[0]
    parts = file.split("/")
    tail = "/".join(parts[-2:]) if parts else file
    return f"{name} ({tail})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000, help="KWOK nodes of 8 GPUs")
    parser.add_argument("--pods", type=int, default=2000, help="pods in each backlog")
    parser.add_argument("--paced-pods", type=int, default=2000, help="pods created paced")
    parser.add_argument("--rate", type=float, default=200.0, help="paced creation, pods/s")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--schedulers", default="kube,gpusched")
    parser.add_argument("--qps", type=int, default=5000, help="both schedulers' client qps")
    parser.add_argument("--burst", type=int, default=5000, help="both schedulers' client burst")
    parser.add_argument("--seed", type=int, default=1, help="the mixed backlog's shapes")
    parser.add_argument("--quick", action="store_true", help="100 nodes, 400 pods each")
    parser.add_argument("--profile", action="store_true", help="py-spy the gpusched process")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for one run")
    parser.add_argument("--out", default="", help="logs and profiles (default: a temp dir)")
    parser.add_argument(
        "--base-tree", type=Path, help="a checkout whose `gpusched run` is the 'base' scheduler"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.nodes, args.pods, args.paced_pods = 100, 400, 400
    scenarios = [x.strip() for x in args.scenarios.split(",") if x.strip()]
    schedulers = [x.strip() for x in args.schedulers.split(",") if x.strip()]
    if args.base_tree is not None and "base" not in schedulers:
        schedulers.insert(schedulers.index("gpusched") if "gpusched" in schedulers else 0, "base")
    if "base" in schedulers and args.base_tree is None:
        parser.error("the base scheduler needs --base-tree")
    for x in scenarios:
        if x not in SCENARIOS:
            parser.error(f"unknown scenario {x!r}; known: {', '.join(SCENARIOS)}")
    for x in schedulers:
        if x not in SCHEDULERS:
            parser.error(f"unknown scheduler {x!r}; known: {', '.join(SCHEDULERS)}")
    for x in scenarios:
        demand = max(
            sum(sh.gpus(w) for sh in shapes(x, args.paced_pods if x == "paced" else args.pods, 1))
            for w in schedulers
        )
        if demand > args.nodes * 8:
            parser.error(f"{x}: {demand} cards asked of {args.nodes * 8}: fewer pods or more nodes")
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-cluster-"))
    out.mkdir(parents=True, exist_ok=True)
    s = Settings(
        nodes=args.nodes,
        pods=args.pods,
        paced_pods=args.paced_pods,
        rate=args.rate,
        qps=args.qps,
        burst=args.burst,
        seed=args.seed,
        profile=args.profile,
        out=out,
        timeout=args.timeout,
        base_tree=args.base_tree.resolve() if args.base_tree else None,
    )
    _log(f"out: {out}")
    started = time.monotonic()
    tables = []
    profiles = []
    for scenario in scenarios:
        results: dict[str, RunResult] = {}
        for which in schedulers:
            options = ClusterOptions(kube_scheduler=False, controller_manager=False, log=_log)
            with LocalCluster(options) as cluster:
                results[which] = asyncio.run(run_one(cluster, scenario, which, s))
            r = results[which]
            _log(
                f"{scenario}-{which}: {r.bound}/{r.pods} bound in {r.seconds:.1f}s,"
                f" {_f(_mean(r.throughput), '.1f')} pods/s"
            )
            if r.profile:
                profiles.append(profile_summary(Path(r.profile)))
        tables.append(table(scenario, results, s))
        print(tables[-1], flush=True)
    print(
        f"\n{os.cpu_count()} cores; total {time.monotonic() - started:.0f}s;"
        f" logs and profiles in {out}"
    )
    for p in profiles:
        print("\n" + p)
    return 0


if __name__ == "__main__":
    sys.exit(main())

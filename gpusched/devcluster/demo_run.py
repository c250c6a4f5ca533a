"""`make demo`: gpusched on the local control plane, then the same workload on an
identical fresh cluster under kube-scheduler, side by side.

1. the local control plane of `make cluster-up` with the demo fleet (demo_workload), kept
   running afterwards for kubectl; reused when a cluster with that fleet is already up
   and no pod outside the demo's namespace holds or asks for its GPUs;
2. `gpusched run` in the background, its JSON log (the decision records) in
   out/demo/gpusched.log, which `make cluster-down` leaves alone;
3. the workload's four waves (demo_workload), each awaited by watching; then pod -> node ->
   cards -> why, grouped by controller;
4. a second control plane (temp dir, stopped at the end) whose kube-scheduler runs its
   shipped default profile, the same fleet, the same waves as a user without gpusched
   writes them;
5. the side-by-side table, a verdict and a legend (demo_compare); no verdict when a wave
   of either side did not settle in time.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gpusched.devcluster import demo_compare, demo_workload
from gpusched.devcluster.bootstrap import install_crds, load_nodes, wait_nodes_ready
from gpusched.devcluster.cluster import ClusterOptions, LocalCluster
from gpusched.devcluster.demo import (
    DEMO_NAMESPACE,
    PID_FILE,
    apply_docs,
    cards_of,
    clear_workloads,
    daemon_alive,
    read_decisions,
    wait_settled,
    why,
)
from gpusched.devcluster.nodes import NodeSpec, read_openb_csv
from gpusched.devcluster.testkit import daemon_argv
from gpusched.kube import JSON, Kube, create_namespace, delete_namespace

OUT_DIR = Path("out/demo")
LOG_NAME = "gpusched.log"
NODES_NAME = "nodes.csv"
WAVE_TIMEOUT = 120.0
HEARTBEAT = 10.0  # seconds between "still waiting" lines: no long silence anywhere
EXAMPLE_ROWS = 3  # pods shown per controller before "... N more"


def log(message: str) -> None:
    print(f"demo: {message}", file=sys.stderr, flush=True)


# -- waiting ---------------------------------------------------------------------------------


def final(pod: JSON) -> bool:
    """Running on its node (KWOK starts a bound pod at once), or refused for good
    (PodScheduled=False, reason Unschedulable). A gang member is first
    NotReadyForScheduling while its siblings are created: not final yet."""
    if (pod.get("spec") or {}).get("nodeName"):
        return (pod.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return bool(c.get("reason") == "Unschedulable")
    return False


def gangs_whole(pods: Mapping[str, JSON]) -> bool:
    """Every gang's members are all bound or none is (members waiting at Permit are not)."""
    groups: dict[str, list[bool]] = {}
    for pod in pods.values():
        group = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
        if group:
            groups.setdefault(group, []).append(bool(pod["spec"].get("nodeName")))
    return all(all(b) or not any(b) for b in groups.values())


def settled_wave(want: int) -> Callable[[dict[str, JSON]], bool]:
    def done(pods: dict[str, JSON]) -> bool:
        return len(pods) >= want and all(final(p) for p in pods.values()) and gangs_whole(pods)

    return done


@dataclass
class Waves:
    """The pods after each wave, and the waves that did not settle in time ("wave 4/4
    (train)"): with any, the numbers are of pods still being placed, not an outcome."""

    after: list[dict[str, JSON]] = field(default_factory=list)
    unsettled: list[str] = field(default_factory=list)

    @property
    def final(self) -> dict[str, JSON]:
        return self.after[-1] if self.after else {}


async def run_waves(
    kube: Kube,
    namespace: str,
    variant: str,
    *,
    timeout: float = WAVE_TIMEOUT,  # noqa: ASYNC109
) -> Waves:
    """Apply the workload's waves in order, each once the previous one settled; the pods
    after each wave. A wave still unsettled after `timeout` is logged, recorded in
    `unsettled`, and the next wave applied anyway (so the demo still shows where the pods
    went)."""
    await clear_workloads(kube, namespace)
    await delete_namespace(kube, namespace)
    await create_namespace(kube, namespace)
    want = 0
    pods: dict[str, JSON] = {}
    out = Waves()
    waves = demo_workload.waves()
    for k, wave in enumerate(waves, 1):
        t0 = time.monotonic()
        await apply_docs(kube, namespace, [demo_workload.manifest(p, variant) for p in wave])
        want += sum(p.pods for p in wave)
        what = ", ".join(f"{p.name} ({_shape(p)})" for p in wave)
        seen: dict[str, JSON] = {}
        until = _recording(settled_wave(want), seen)
        beat = asyncio.create_task(_heartbeat(f"wave {k}", seen, want))
        try:
            pods = await wait_settled(kube, namespace, (), timeout=timeout, until=until)
        except TimeoutError as exc:
            log(f"  wave {k}/{len(waves)}: not settled after {timeout:.0f}s, going on: {exc}")
            out.unsettled.append(f"wave {k}/{len(waves)} ({', '.join(p.name for p in wave)})")
            listing = await kube.get(f"/api/v1/namespaces/{namespace}/pods")
            pods = {p["metadata"]["name"]: p for p in listing.get("items", [])}
        finally:
            beat.cancel()
        names = {p.name for p in wave}
        mine = [p for p in pods.values() if _group(p) in names]
        bound = sum(1 for p in mine if p["spec"].get("nodeName"))
        log(
            f"  wave {k}/{len(waves)}: {what}: {bound}/{len(mine)} pods placed"
            f" in {time.monotonic() - t0:.1f}s"
        )
        out.after.append(pods)
    return out


def _recording(
    done: Callable[[dict[str, JSON]], bool], seen: dict[str, JSON]
) -> Callable[[dict[str, JSON]], bool]:
    """`done`, keeping the pods it last saw in `seen` (for the heartbeat's line)."""

    def until(now: dict[str, JSON]) -> bool:
        seen.clear()
        seen.update(now)
        return done(now)

    return until


async def _heartbeat(what: str, pods: Mapping[str, JSON], want: int) -> None:
    """A line every HEARTBEAT seconds while a wave is awaited (cancelled when it settles)."""
    t0 = time.monotonic()
    while True:
        await asyncio.sleep(HEARTBEAT)  # a progress printer, not synchronisation
        placed = sum(1 for p in pods.values() if (p.get("spec") or {}).get("nodeName"))
        log(
            f"  still waiting for {what}: {len(pods)}/{want} pods exist, {placed} placed"
            f" ({time.monotonic() - t0:.0f}s)"
        )


def _shape(part: demo_workload.Part) -> str:
    if part.cards:
        gang = ", all-or-nothing" if part.gang else ""
        return f"{part.pods} x {part.cards} GPU{'s' if part.cards > 1 else ''}{gang}"
    if part.milli:
        return f"{part.pods} x {part.milli / 1000:g} GPU"
    return f"{part.pods} x CPU only"


def _group(pod: JSON) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(demo_workload.GROUP_LABEL, ""))


# -- the gpusched cluster ------------------------------------------------------------------


def ensure_cluster(state_dir: Path, nodes_csv: Path, fleet: Sequence[NodeSpec]) -> Path:
    """The `make cluster-up` cluster with the demo fleet: reused when it is up with exactly
    these nodes and no pod outside the demo's namespace holds or asks for GPUs (the demo
    counts only its own pods against the nodes' cards, and compares with a fresh cluster),
    started otherwise; SystemExit when another fleet is up, or such pods exist."""
    kubeconfig = state_dir / "kubeconfig"
    if (state_dir / "state.json").exists() and kubeconfig.exists():
        names, pods = asyncio.run(_nodes_and_pods(kubeconfig))
        if names == {s.name for s in fleet}:
            others = demo_compare.foreign_gpu_pods(pods, names, DEMO_NAMESPACE)
            if others:
                raise SystemExit(
                    f"demo: the running cluster has {len(others)} pod(s) outside"
                    f" {DEMO_NAMESPACE} holding or asking for GPUs"
                    f" ({', '.join(others[:5])}{' ...' if len(others) > 5 else ''}): the"
                    " demo compares against a fresh cluster, so delete them or"
                    " `make cluster-down` first"
                )
            log("reusing the running cluster (it has the demo's nodes, no other GPU pods)")
            return kubeconfig.resolve()
        raise SystemExit(
            f"demo: a cluster from `make cluster-up` is running with {len(names)} other nodes;"
            " `make cluster-down` first (the demo needs its own fleet)"
        )
    log(f"starting the local control plane with {len(fleet)} KWOK GPU nodes (make cluster-up)")
    rc = subprocess.call(
        [
            sys.executable,
            "-m",
            "gpusched.devcluster",
            "--state-dir",
            str(state_dir),
            "up",
            "--node-list",
            str(nodes_csv),
        ],
        stdout=subprocess.DEVNULL,  # its kubectl hints: the demo prints its own at the end
    )
    if rc != 0:
        raise SystemExit(f"demo: `make cluster-up` failed (exit {rc}); see above")
    return kubeconfig.resolve()


async def _nodes_and_pods(kubeconfig: Path) -> tuple[set[str], list[JSON]]:
    """The cluster's node names and every pod of every namespace."""
    async with await Kube.connect(kubeconfig) as kube:
        nodes = await kube.get("/api/v1/nodes")
        pods = await kube.get("/api/v1/pods")
    names = {n["metadata"]["name"] for n in nodes.get("items", [])}
    return names, list(pods.get("items", []))


def start_daemon(state_dir: Path, kubeconfig: Path, log_path: Path) -> None:
    """`gpusched run` in the background (outliving this command, like the cluster), its log
    in `log_path`; returns once it leads, printing a line every HEARTBEAT seconds while its
    kernels compile (numba: one to two minutes the first time in a checkout, seconds once
    cached)."""
    pid = daemon_alive(state_dir)
    if pid:
        log(f"the daemon is already running (pid {pid}); its log: {log_path}")
        return
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            daemon_argv(kubeconfig),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # Each record reaches the file as it is logged, not when a buffer fills: the
            # table below reads them right after the pods are bound.
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    (state_dir / PID_FILE).write_text(str(proc.pid))
    log(f"gpusched run started (pid {proc.pid}); its JSON log: {log_path}")
    t0 = time.monotonic()
    said = t0
    while b'"leader elected"' not in log_path.read_bytes():
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").splitlines()[-15:]
            raise SystemExit(
                f"demo: gpusched run exited with code {proc.returncode}; last lines of"
                f" {log_path}:\n" + "\n".join(tail)
            )
        now = time.monotonic()
        if now - said >= HEARTBEAT:
            if said == t0:
                log(
                    "  gpusched is compiling its kernels (numba: one to two minutes the first"
                    " time in a checkout, seconds once cached)"
                )
            log(f"  ... still compiling: {now - t0:.0f}s")
            said = now
        # Another process's log file: there is nothing to watch, so look twice a second.
        time.sleep(0.5)
    log(f"  gpusched leads and schedules ({time.monotonic() - t0:.0f}s after start)")


def bound_decisions(
    log_path: Path, pods: Mapping[str, JSON], *, wait: float = 10.0
) -> dict[str, JSON]:
    """The last decision record of each pod in the daemon's log, once every bound pod has
    its `bound` record (the daemon logs it just after the Binding, so the pod can be seen
    bound a moment earlier), or after `wait` seconds with what is there."""
    bound = {f"{DEMO_NAMESPACE}/{name}" for name, p in pods.items() if p["spec"].get("nodeName")}
    deadline = time.monotonic() + wait
    while True:
        decisions: dict[str, JSON] = {}
        for rec in read_decisions(log_path):
            decisions[str(rec.get("pod", ""))] = rec  # the last attempt wins
        have = {k for k, r in decisions.items() if r.get("result") == "bound"}
        if bound <= have or time.monotonic() >= deadline:
            return decisions
        time.sleep(0.2)  # another process's file: nothing to watch


# -- the per-pod table ----------------------------------------------------------------------

WHY_CAPTION = (
    "why: the node's total score and the two plugins that added most to it, with raw scores"
    " as in the pod's Scheduled Event (plugins without data left out); best of N: N nodes fit;"
    " N tied: that many nodes had the top total, and gpusched's seeded node order"
    " (deterministic) picked one; cards: GPUFit's rule where it had a choice"
)


def pod_table(pods: Mapping[str, JSON], decisions: Mapping[str, JSON], namespace: str) -> Table:
    """pod -> node -> cards -> why, grouped by controller: the first EXAMPLE_ROWS pods of
    each, then one line for the rest (how many, on how many nodes)."""
    table = Table(
        title="gpusched: where each pod went, and why (from its decision record)",
        caption=WHY_CAPTION,
    )
    for col in ("controller", "pod", "node", "cards", "why"):
        table.add_column(col, overflow="fold")
    groups: dict[str, list[JSON]] = {}
    for pod in pods.values():
        groups.setdefault(_group(pod), []).append(pod)
    order = {p.name: i for i, p in enumerate(demo_workload.PARTS)}
    for group in sorted(groups, key=lambda g: order.get(g, len(order))):
        members = sorted(groups[group], key=lambda p: p["metadata"]["name"])
        for i, pod in enumerate(members[:EXAMPLE_ROWS]):
            name = pod["metadata"]["name"]
            row = _pod_row(pod, decisions.get(f"{namespace}/{name}", {}))
            table.add_row(group if i == 0 else "", name, *row)
        rest = members[EXAMPLE_ROWS:]
        if rest:
            bound = [p for p in rest if p["spec"].get("nodeName")]
            nodes = {p["spec"]["nodeName"] for p in bound}
            text = f"... {len(rest)} more: {len(bound)} on {len(nodes)} node(s)"
            if len(bound) < len(rest):
                text += f", {len(rest) - len(bound)} pending"
            table.add_row("", text, "", "", "")
    return table


def _pod_row(pod: JSON, record: JSON) -> tuple[str, str, str]:
    node = pod["spec"].get("nodeName", "")
    if node:
        cards, milli = cards_of(pod)
        text = ",".join(map(str, cards)) + (f" ({milli}m)" if milli < 1000 else "")
        return node, text or "-", why(record)
    message = ""
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled":
            message = str(c.get("message", ""))
    return "[red]pending", "-", message[:200]


# -- the command ---------------------------------------------------------------------------


BASELINES = {
    # kube-scheduler as shipped: NodeResourcesFit LeastAllocated on cpu and memory.
    "default": "kube-scheduler's default profile",
    # The devcluster's tuned baseline (configs.kube_scheduler_config): MostAllocated with
    # nvidia.com/gpu weighted 10, the best GPU packing kube-scheduler offers without plugins.
    "gpu-packing": "kube-scheduler tuned to pack GPUs (MostAllocated, nvidia.com/gpu weight 10)",
}


def run(state_dir: Path, out_dir: Path = OUT_DIR, *, baseline: str = "default") -> int:
    started = time.monotonic()
    fleet = demo_workload.demo_fleet()
    out_dir.mkdir(parents=True, exist_ok=True)
    nodes_csv = out_dir / NODES_NAME
    nodes_csv.write_text(demo_workload.fleet_csv(fleet))
    fleet = read_openb_csv(nodes_csv)  # what both clusters load
    capacity = {s.name: s.gpus for s in fleet}
    log_path = (out_dir / LOG_NAME).resolve()
    console = Console(width=max(120, Console().width))

    log("step 1/4: gpusched's cluster")
    kubeconfig = ensure_cluster(state_dir, nodes_csv, fleet)
    start_daemon(state_dir, kubeconfig, log_path)

    log("step 2/4: the workload under gpusched (schedulerName: ai-scheduler)")
    ours_waves = asyncio.run(_on(kubeconfig, demo_workload.GPUSCHED))
    ours_pods = ours_waves.final
    decisions = bound_decisions(log_path, ours_pods)
    console.print(pod_table(ours_pods, decisions, DEMO_NAMESPACE))

    log(
        "step 3/4: the same workload on an identical fresh cluster under"
        f" {BASELINES[baseline]} (GangScheduling on; shared replicas ask nvidia.com/gpu: 1)"
    )
    stock = baseline == "default"
    cluster = LocalCluster(ClusterOptions(attached=True, kube_scheduler_stock=stock))
    with cluster:
        theirs_waves = asyncio.run(_fresh(cluster, fleet))
    log("  kube-scheduler's cluster stopped")

    log("step 4/4: side by side")
    ours, theirs = (
        demo_compare.outcome(w.final.values(), capacity, before_gang=_before_gang(w.after).values())
        for w in (ours_waves, theirs_waves)
    )
    rows = demo_compare.rows(ours, theirs)
    title = (
        f"The same workload, {sum(p.pods for p in demo_workload.PARTS)} pods on"
        f" {len(fleet)} nodes x 8 GPUs: gpusched vs {BASELINES[baseline]}"
    )
    unsettled = [f"{w} under gpusched" for w in ours_waves.unsettled]
    unsettled += [f"{w} under kube-scheduler" for w in theirs_waves.unsettled]
    console.print(demo_compare.render(rows, title=title, judged=not unsettled))
    console.print(demo_compare.verdict(rows, unsettled), soft_wrap=True, markup=False)
    console.print("Legend:")
    for line in demo_compare.legend_lines():
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    log(f"done in {time.monotonic() - started:.0f}s. gpusched's decision records: {log_path}")
    log(
        "gpusched's cluster and daemon keep running for kubectl:\n"
        f"  export KUBECONFIG={kubeconfig}\n"
        f"  export PATH={(state_dir / 'bin').resolve()}:$PATH\n"
        f"  kubectl -n {DEMO_NAMESPACE} get pods -o wide\n"
        "  `make cluster-down` stops both (the log above stays)."
    )
    return 0


def _before_gang(after: Sequence[dict[str, JSON]]) -> dict[str, JSON]:
    """The pods after the wave before the gang's (the gang comes last)."""
    gang_wave = next(
        (i for i, wave in enumerate(demo_workload.waves()) if any(p.gang for p in wave)), 0
    )
    return after[gang_wave - 1] if gang_wave > 0 else {}


async def _on(kubeconfig: Path, variant: str) -> Waves:
    async with await Kube.connect(kubeconfig) as kube:
        return await run_waves(kube, DEMO_NAMESPACE, variant)


async def _fresh(cluster: LocalCluster, fleet: Sequence[NodeSpec]) -> Waves:
    async with await Kube.connect(cluster.kubeconfig) as kube:
        await install_crds(kube, cluster.crd_dir)
        await load_nodes(kube, fleet)
        await wait_nodes_ready(kube, [s.name for s in fleet])
        log(f"  control plane and {len(fleet)} nodes up")
        return await run_waves(kube, DEMO_NAMESPACE, demo_workload.KUBE_SCHEDULER)

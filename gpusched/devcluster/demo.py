"""`make demo`: the daemon on the local control plane, compared with kube-scheduler.

    python -m gpusched.devcluster.demo up     # what `make demo` runs (demo_run.py)
    python -m gpusched.devcluster.demo stop   # stop the daemon (`make cluster-down` runs it)
    python -m gpusched.devcluster.demo write-workload   # regenerate demo-workload.yaml

The daemon runs in the background with its JSON log in out/demo/gpusched.log; the table of
where each pod landed, on which cards and why, is read back from that log's decision
records, the same records `kubectl logs` shows in a real cluster.

The workload helpers (`mixed_workload`, `wait_settled`, `card_usage`, `read_decisions`)
are shared with the daemon's integration tests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import Any

import orjson
import yaml

from gpusched.devcluster import demo_workload
from gpusched.kube import JSON, ApiError, Kube, pod_path
from gpusched.model import keys

STATE_DIR = Path(".cluster")
PID_FILE = "gpusched.pid"
WORKLOAD = Path("manifests/examples/demo-workload.yaml")
DEMO_NAMESPACE = "gpusched-demo"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"  # never pulled: KWOK runs no containers


# -- the workload ----------------------------------------------------------------------------


def demo_pod(
    name: str,
    *,
    cpu: str = "500m",
    gpus: int = 0,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    scheduler_name: str | None = keys.SCHEDULER_NAME,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[JSON] = (),
) -> JSON:
    resources: JSON = {"requests": {"cpu": cpu, "memory": "256Mi"}}
    if gpus:
        resources["limits"] = {keys.GPU_RESOURCE: str(gpus)}
    spec: JSON = {
        "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": resources}],
        "terminationGracePeriodSeconds": 0,
    }
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = list(tolerations)
    meta: JSON = {"name": name, "labels": {"app": "gpusched-demo", **(labels or {})}}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def mixed_workload(
    count: int,
    *,
    seed: int = 7,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[JSON] = (),
    impossible: bool = True,
) -> list[JSON]:
    """`count` pods: whole-card (1/2/4/8 cards), shared (a share of one card), CPU-only and
    model-constrained ones, in a fixed shuffled order; with `impossible`, five that no node
    of the generated fleet can hold, whose FailedScheduling Events are part of the demo.
    Each pod carries its kind in the label `demo.gpusched.io/kind`."""
    rng = random.Random(seed)
    kw: dict[str, Any] = {"node_selector": node_selector, "tolerations": tolerations}
    pods: list[JSON] = []

    def add(kind: str, **extra: Any) -> None:
        name = f"{kind}-{len(pods):03d}"
        pods.append(demo_pod(name, labels={"demo.gpusched.io/kind": kind}, **kw, **extra))

    bad = 5 if impossible else 0
    n = count - bad
    shares = (n * 35) // 100
    cpu_only = (n * 20) // 100
    constrained = (n * 10) // 100
    whole = n - shares - cpu_only - constrained
    for i in range(whole):
        # Mostly small jobs, a few 8-card ones that need a whole node.
        add("whole", gpus=8 if i % 12 == 0 else rng.choice((1, 1, 1, 2, 2, 4)))
    for _ in range(shares):
        milli = rng.choice((100, 250, 250, 500, 500, 750))
        add("shared", annotations={keys.GPU_MILLI: str(milli)})
    for _ in range(cpu_only):
        add("cpu", cpu=rng.choice(("250m", "1", "2")))
    for i in range(constrained):
        # Not T4 alone: the few T4 cards are fair game for unconstrained pods arriving
        # first, and without preemption a T4-only pod could then not fit anywhere.
        model = ("A100M80", "V100M32|V100M16", "T4|V100M32")[i % 3]
        gpus = rng.choice((1, 2))
        add("model", gpus=gpus, annotations={keys.GPU_MODEL: model})
    if impossible:
        add("impossible", gpus=16)  # no node has 16 cards
        add("impossible", gpus=1, annotations={keys.GPU_MODEL: "H100"})  # no such model
        add("impossible", annotations={keys.GPU_MILLI: "500", keys.GPU_MEMORY_MIB: "200000"})
        add("impossible", cpu="1000")  # 1000 cores
        add("impossible", annotations={keys.GPU_MILLI: "half"})  # malformed annotation
    order = list(range(len(pods)))
    rng.shuffle(order)
    return [pods[i] for i in order]


# Each kind of demo pod as a user would run it: training (whole cards, model-constrained) as
# Jobs, which KWOK completes once they run; inference, notebooks and CPU services (shared
# cards, CPU-only) as Deployments; the pods that cannot fit as Deployments too, so their
# FailedScheduling Events stay to be read.
_JOB_KINDS = frozenset({"whole", "model"})
GROUP_LABEL = "demo.gpusched.io/group"
APIS = {
    "Pod": "/api/v1/namespaces/{namespace}/pods",
    "Deployment": "/apis/apps/v1/namespaces/{namespace}/deployments",
    "StatefulSet": "/apis/apps/v1/namespaces/{namespace}/statefulsets",
    "Job": "/apis/batch/v1/namespaces/{namespace}/jobs",
    "CronJob": "/apis/batch/v1/namespaces/{namespace}/cronjobs",
    # scheduler-plugins' Coscheduling PodGroup (its CRD is in manifests/crds): a gang.
    "PodGroup": "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups",
}


def as_controllers(pods: Sequence[JSON], *, seed: int = 7) -> list[JSON]:
    """The pods grouped by identical spec and metadata (but name) into Jobs and
    Deployments, one per group with as many replicas as the group has pods; the pod
    template carries the group's name in the label `demo.gpusched.io/group`."""
    groups: dict[str, list[JSON]] = {}
    for pod in pods:
        meta = {k: v for k, v in pod["metadata"].items() if k != "name"}
        key = orjson.dumps({"m": meta, "s": pod["spec"]}, option=orjson.OPT_SORT_KEYS).decode()
        groups.setdefault(key, []).append(pod)
    docs: list[JSON] = []
    counters: dict[str, int] = {}
    for members in groups.values():
        first = members[0]
        kind = first["metadata"]["labels"].get("demo.gpusched.io/kind", "pod")
        base = _group_name(kind, first)
        counters[base] = counters.get(base, 0) + 1
        name = base if counters[base] == 1 else f"{base}-{counters[base]}"
        meta = {k: v for k, v in first["metadata"].items() if k != "name"}
        meta["labels"] = {**meta.get("labels", {}), GROUP_LABEL: name}
        template: JSON = {"metadata": meta, "spec": dict(first["spec"])}
        if kind in _JOB_KINDS:
            template["spec"]["restartPolicy"] = "Never"
            spec: JSON = {
                "parallelism": len(members),
                "completions": len(members),
                "backoffLimit": 0,
                "template": template,
            }
            docs.append(_object("batch/v1", "Job", name, spec))
        else:
            spec = {
                "replicas": len(members),
                "selector": {"matchLabels": {GROUP_LABEL: name}},
                "template": template,
            }
            docs.append(_object("apps/v1", "Deployment", name, spec))
    random.Random(seed).shuffle(docs)
    return docs


def _group_name(kind: str, pod: JSON) -> str:
    """e.g. whole-2gpu, shared-250m, model-a100m80-1gpu, cpu-250m: what its pods ask for."""
    ann = pod["metadata"].get("annotations") or {}
    resources = pod["spec"]["containers"][0]["resources"]
    parts = [kind]
    if keys.GPU_MODEL in ann:
        parts.append(ann[keys.GPU_MODEL].replace("|", "-"))
    gpus = (resources.get("limits") or {}).get(keys.GPU_RESOURCE)
    if gpus:
        parts.append(f"{gpus}gpu")
    if keys.GPU_MILLI in ann:
        parts.append(f"{ann[keys.GPU_MILLI]}m")
    if kind == "cpu" or len(parts) == 1:
        parts.append(str(resources["requests"]["cpu"]))
    name = "-".join(parts).lower()
    return re.sub(r"[^a-z0-9-]+", "-", name).strip("-")


def _object(api_version: str, kind: str, name: str, spec: JSON) -> JSON:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "labels": {"app": "gpusched-demo"}},
        "spec": spec,
    }


def replicas(doc: JSON) -> int:
    """How many pods a workload object asks for at once (a bare Pod: 1)."""
    spec = doc.get("spec") or {}
    if doc.get("kind") == "Job":
        return int(spec.get("parallelism", 1))
    if doc.get("kind") in ("Deployment", "StatefulSet"):
        return int(spec.get("replicas", 1))
    return 1 if doc.get("kind") == "Pod" else 0


async def apply_docs(kube: Kube, namespace: str, docs: Iterable[JSON]) -> None:
    """Create workload objects (kinds in APIS) in `namespace`, 16 at a time; ValueError
    for any other kind, before anything is created."""
    docs = list(docs)
    unknown = sorted({str(d.get("kind")) for d in docs} - set(APIS))
    if unknown:
        raise ValueError(f"cannot apply kinds {unknown}; known: {sorted(APIS)}")
    sem = asyncio.Semaphore(16)

    async def create(doc: JSON) -> None:
        async with sem:
            await kube.post(APIS[doc["kind"]].format(namespace=namespace), doc)

    await asyncio.gather(*(create(d) for d in docs))


async def clear_workloads(kube: Kube, namespace: str, *, timeout: float = 120.0) -> None:  # noqa: ASYNC109
    """Delete the namespace's workload objects (the kinds in APIS) and their pods, and return
    once no pod is left (watched). Controllers go first, so nothing re-creates a pod;
    deleting only the namespace would leave them: delete_namespace finalizes it itself, and
    a Deployment left in etcd comes back with the next namespace of that name."""
    background = [("propagationPolicy", "Background")]
    for kind, path in APIS.items():
        if kind == "Pod":
            continue
        try:
            await kube.delete(path.format(namespace=namespace), query=background)
        except ApiError as exc:
            if exc.status != 404:
                raise
    try:
        await kube.delete(
            APIS["Pod"].format(namespace=namespace), query=[("gracePeriodSeconds", "0")]
        )
    except ApiError as exc:
        if exc.status != 404:
            raise
    await wait_settled(kube, namespace, (), timeout=timeout, until=lambda pods: not pods)


# -- waiting and checking ---------------------------------------------------------------------


def settled(pod: JSON) -> bool:
    """Bound, or reported unschedulable (PodScheduled=False with a reason)."""
    if (pod.get("spec") or {}).get("nodeName"):
        return True
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason"):
            return True
    return False


async def wait_settled(
    kube: Kube,
    namespace: str,
    names: Iterable[str],
    *,
    timeout: float = 120.0,  # noqa: ASYNC109 - named in the error with what was pending
    done: Callable[[JSON], bool] = settled,
    until: Callable[[dict[str, JSON]], bool] | None = None,
) -> dict[str, JSON]:
    """Watch the namespace's pods until every named pod satisfies `done` (or, with `until`,
    until `until(pods by name)` holds); returns them all. Lists, then watches from the
    list's resourceVersion (re-lists on 410), never polls."""
    want = set(names)
    pods: dict[str, JSON] = {}

    def finished() -> bool:
        if until is not None:
            return until(pods)
        return all(n in pods and done(pods[n]) for n in want)

    async def run() -> None:
        while True:
            listing = await kube.get(pod_path(namespace))
            pods.clear()
            for item in listing.get("items", []):
                pods[item["metadata"]["name"]] = item
            if finished():
                return
            version = str(listing["metadata"]["resourceVersion"])
            events = kube.watch(pod_path(namespace), resource_version=version)
            async with aclosing(events):
                async for event in events:
                    if event.type == "ERROR":
                        break
                    name = event.object.get("metadata", {}).get("name", "")
                    if event.type == "DELETED":
                        pods.pop(name, None)
                    elif event.type in ("ADDED", "MODIFIED"):
                        pods[name] = event.object
                    if finished():
                        return

    try:
        await asyncio.wait_for(run(), timeout)
    except TimeoutError:
        if until is not None:
            raise TimeoutError(
                f"after {timeout:.0f}s the condition on the pods of {namespace} still does not"
                f" hold ({len(pods)} pods, {sum(1 for p in pods.values() if done(p))} of them"
                f" settled; pending: {_pending_reasons(pods, done)})"
            ) from None
        pending = sorted(n for n in want if n not in pods or not done(pods[n]))
        raise TimeoutError(
            f"after {timeout:.0f}s {len(pending)} pod(s) of {namespace} are still pending:"
            f" {', '.join(pending[:10])}{' ...' if len(pending) > 10 else ''}"
        ) from None
    return dict(pods)


def _pending_reasons(pods: Mapping[str, JSON], done: Callable[[JSON], bool]) -> str:
    """The first few pods not done, each with its PodScheduled message if it has one."""
    out = []
    for name, pod in sorted(pods.items()):
        if done(pod):
            continue
        conditions = (pod.get("status") or {}).get("conditions") or ()
        why = next(
            (c.get("message", "") for c in conditions if c.get("type") == "PodScheduled"), ""
        )
        out.append(f"{name}: {why[:160]}" if why else name)
    return "; ".join(out[:5]) + (" ..." if len(out) > 5 else "") or "none"


def cards_of(pod: JSON) -> tuple[list[int], int]:
    """(cards, milli per card) a bound pod holds according to its annotations."""
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    raw = ann.get(keys.GPU_IDS, "")
    cards = [int(c) for c in raw.split(",") if c.strip().isdigit()]
    milli = int(ann.get(keys.GPU_MILLI_ASSIGNED) or 1000)
    return cards, milli


def card_usage(pods: Iterable[JSON], card_counts: Mapping[str, int]) -> list[str]:
    """Recompute per-card use of bound pods from the API objects; the problems found
    (over-allocated cards, wrong number of cards, a card the node does not have)."""
    used: dict[tuple[str, int], int] = {}
    problems: list[str] = []
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or node not in card_counts:
            continue
        name = pod["metadata"]["name"]
        limits: JSON = {}
        for c in pod["spec"].get("containers", []):
            limits.update((c.get("resources") or {}).get("limits") or {})
        whole = int(limits.get(keys.GPU_RESOURCE, 0))
        ann = pod["metadata"].get("annotations") or {}
        cards, milli = cards_of(pod)
        if whole and len(cards) != whole:
            problems.append(f"{name}: asks for {whole} cards, annotated {cards}")
        if keys.GPU_MILLI in ann and not whole and len(cards) != 1:
            problems.append(f"{name}: a shared pod annotated with cards {cards}")
        for card in cards:
            if card >= card_counts[node]:
                problems.append(f"{name}: card {card} on {node}, which has {card_counts[node]}")
            key = (node, card)
            used[key] = used.get(key, 0) + (1000 if whole else milli)
    for (node, card), milli in sorted(used.items()):
        if milli > 1000:
            problems.append(f"{node} card {card} holds {milli} milli-GPU (> 1000)")
    return problems


def read_decisions(path: Path | str) -> list[JSON]:
    """Every decision record of a daemon's JSON log (other lines are skipped)."""
    out: list[JSON] = []
    with Path(path).open("rb") as handle:
        for line in handle:
            if b'"decision"' not in line:
                continue
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(rec, dict) and rec.get("event") == "decision":
                out.append(rec)
    return out


def why(record: JSON, terms: int = 2) -> str:
    """The chosen node's total and the `terms` plugins that added most to it, with their raw
    scores as the Scheduled Event shows them (the record's `chosen_scores`, in that order);
    a plugin marked "no data" scored a neutral stand-in, not a reason, and is left out. Then
    how many nodes fitted, the tie if there was one, and in a few words why those cards,
    e.g. 'score 69.4: GPUFragmentation 73.5, NVLinkTopology 100.0; best of 5, 4 tied; cards:
    tightest NVLink island 0'. Reads only the keys it needs."""
    top = record.get("top") or []
    chosen = next(
        (t for t in top if isinstance(t, dict) and t.get("node") == record.get("node")), None
    )
    if chosen is None:
        return ""
    scored = record.get("chosen_scores")
    named = [
        f"{name} {float(v):.1f}"
        for name, v in (scored.items() if isinstance(scored, dict) else ())
        if isinstance(v, (int, float)) and not isinstance(v, bool)  # not "no data"
    ][:terms]
    total = chosen.get("total")
    head = f"score {total:.1f}" if isinstance(total, (int, float)) else "score"
    parts = [f"{head}: {', '.join(named)}" if named else head]
    fit = f"best of {record.get('feasible', 0)}"
    tie = record.get("tie")
    if isinstance(tie, dict) and isinstance(tie.get("tied"), int) and tie["tied"] > 1:
        fit += f", {tie['tied']} tied"  # the rule (seeded node order): the table's caption
    parts.append(fit)
    cards = cards_in_brief(str(record.get("cards_reason") or ""))
    if cards:
        parts.append(f"cards: {cards}")
    return "; ".join(parts)


_CARD_REASONS = (
    # GPUFit's wordings (gpusched/plugins/gpu_fit/why.py), each cut to its rule.
    # Only when another island could have held the pod ("keeps island 1 ..."): on a node
    # with one island (the demo's) there was nothing to choose.
    (
        re.compile(r"^NVLink island (\d+) \(cards [^)]*\): the island with the fewest.*, keeps"),
        r"tightest NVLink island \1",
    ),
    (re.compile(r"^NVLink island \d+ \(cards [^)]*\): the island with the fewest"), ""),
    (re.compile(r"so they span islands ([\d,]+)"), r"span NVLink islands \1"),
    (re.compile(r"NVLink layout unknown"), "NVLink layout unknown"),
    (re.compile(r"^card \d+ \(([^:)]+?)(?::[^)]*)?\): (\d+m) free left"), r"\1, \2 left"),
    (re.compile(r"^best-fit card \d+ \([^)]*\): (\d+m) free left"), r"best fit, \1 left"),
)


def cards_in_brief(reason: str) -> str:
    """GPUFit's `cards_reason` cut to its rule ("tightest NVLink island 0", "best fit, 250m
    left", "GPUFragmentation's pick, 250m left"), "" when the node left no choice of island;
    an unknown wording up to its first ':'."""
    for pattern, short in _CARD_REASONS:
        found = pattern.search(reason)
        if found:
            return found.expand(short)
    return reason.split(":", 1)[0][:40]


# -- the command ---------------------------------------------------------------------------


def _log(message: str) -> None:
    print(f"demo: {message}", file=sys.stderr, flush=True)


def daemon_alive(state_dir: Path) -> int:
    """The pid of the demo's daemon when it runs, else 0."""
    pid_file = state_dir / PID_FILE
    if not pid_file.exists():
        return 0
    pid = int(pid_file.read_text().strip() or 0)
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return 0
    return pid


def load_workload(path: Path = WORKLOAD) -> list[JSON]:
    """The workload objects of a manifest (documents of the kinds in APIS)."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return [d for d in docs if d.get("kind") in APIS]


def cmd_stop(state_dir: Path) -> int:
    pid = daemon_alive(state_dir)
    (state_dir / PID_FILE).unlink(missing_ok=True)
    if not pid:
        return 0
    os.kill(pid, signal.SIGTERM)  # the daemon finishes its bindings and exits 0
    deadline = time.monotonic() + 35
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            _log(f"daemon (pid {pid}) stopped")
            return 0
        time.sleep(0.2)  # waiting for another process to exit: there is nothing to watch
    os.kill(pid, signal.SIGKILL)
    _log(f"daemon (pid {pid}) did not stop within 35s; killed")
    return 0


WORKLOAD_HEADER = """\
# `make demo`'s workload as gpusched runs it (generated by `python -m
# gpusched.devcluster.demo write-workload` from gpusched/devcluster/demo_workload.py, which
# says why it looks so): inference replicas sharing cards, CPU-only replicas, fine-tuning and
# evaluation Jobs, and a 4 x 4-GPU all-or-nothing training Job (an Indexed Job: the job
# controller makes its scheduling.k8s.io/v1alpha2 PodGroup). `make demo` applies the
# documents in four waves, in this order. kubectl apply -f works too.
"""


def write_workload(path: Path = WORKLOAD) -> None:
    """Regenerate manifests/examples/demo-workload.yaml from demo_workload (gpusched's
    variant; a test checks the file is what this writes)."""
    path.write_text(workload_text())


def workload_text() -> str:
    docs = demo_workload.manifests(demo_workload.GPUSCHED)
    return WORKLOAD_HEADER + yaml.safe_dump_all(docs, sort_keys=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpusched.devcluster.demo")
    parser.add_argument("--state-dir", type=Path, default=STATE_DIR)
    parser.add_argument("--workload", type=Path, default=WORKLOAD)
    parser.add_argument(
        "--baseline",
        choices=("default", "gpu-packing"),
        default="default",
        help="kube-scheduler's profile in the comparison: as shipped (default), or tuned"
        " to pack GPUs (MostAllocated, nvidia.com/gpu weight 10)",
    )
    parser.add_argument("command", choices=("up", "stop", "write-workload"))
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            # Here: demo_run imports this module's helpers.
            from gpusched.devcluster import demo_run  # noqa: PLC0415

            return demo_run.run(args.state_dir, baseline=args.baseline)
        if args.command == "stop":
            return cmd_stop(args.state_dir)
        write_workload(args.workload)
        return 0
    except (ApiError, TimeoutError, OSError) as exc:
        _log(f"failed: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())

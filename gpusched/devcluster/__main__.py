"""`python -m gpusched.devcluster up|down|status`: a local cluster a person can use.

``up`` starts the control plane detached, loads the GPU fleet, and writes under .cluster/:
kubeconfig (admin), bin/ (links to kubectl and the other binaries), state.json, logs/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

from gpusched.devcluster import bootstrap, nodes, prometheus
from gpusched.devcluster.binaries import BinaryNotFoundError, find_binaries, pinned_versions
from gpusched.devcluster.cluster import (
    ClusterOptions,
    LocalCluster,
    read_state,
    stop_recorded,
)
from gpusched.devcluster.processes import StartError, http_ok
from gpusched.kube import Kube, wait_for


def _log(message: str) -> None:
    print(f"devcluster: {message}", file=sys.stderr, flush=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _specs(args: argparse.Namespace) -> list[nodes.NodeSpec]:
    if args.node_list:
        return nodes.read_openb_csv(args.node_list, limit=args.nodes if args.nodes_set else None)
    return nodes.generated_fleet(args.nodes)


async def _bootstrap(cluster: LocalCluster, specs: list[nodes.NodeSpec]) -> None:
    async with await Kube.connect(cluster.kubeconfig) as kube:
        t0 = time.monotonic()
        crds = await bootstrap.install_crds(kube, cluster.crd_dir)
        _log(f"installed CRDs {', '.join(crds)} in {time.monotonic() - t0:.1f}s")
        t0 = time.monotonic()
        await bootstrap.load_nodes(kube, specs)
        await bootstrap.wait_nodes_ready(kube, [s.name for s in specs])
        _log(f"{len(specs)} KWOK GPU nodes Ready in {time.monotonic() - t0:.1f}s")
        # With the ServiceAccount admission plugin on, a pod in `default` is refused until
        # serviceaccount-controller has created default/default: `kubectl run` must work.
        await wait_for(
            kube,
            "/api/v1/namespaces/default/serviceaccounts",
            "default",
            lambda _sa: True,
            what="the default ServiceAccount of namespace default",
        )


def cmd_up(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    state_file = state_dir / "state.json"
    previous = read_state(state_file)
    if previous and any(_alive(int(p)) for p in previous.get("processes", {}).values()):
        _log(f"a cluster is already running ({previous['server']}); `make cluster-down` first")
        return 1
    try:
        specs = _specs(args)
    except (OSError, ValueError) as exc:
        _log(f"cannot read the node list: {exc}")
        return 2
    cluster = LocalCluster(
        ClusterOptions(attached=False, kube_scheduler=not args.no_kube_scheduler, log=_log)
    )
    try:
        cluster.start()
    except (BinaryNotFoundError, StartError) as exc:
        _log(str(exc))
        return 1
    try:
        asyncio.run(_bootstrap(cluster, specs))
    except Exception as exc:
        _log(f"bootstrap failed: {exc}; stopping the cluster")
        cluster.stop()
        return 1

    state_dir.mkdir(parents=True, exist_ok=True)
    kubeconfig = state_dir / "kubeconfig"
    kubeconfig.write_bytes(cluster.kubeconfig.read_bytes())
    kubeconfig.chmod(0o600)
    bin_dir = state_dir / "bin"
    bin_dir.mkdir(exist_ok=True)
    assert cluster.binaries is not None
    for name, path in cluster.binaries.all().items():
        link = bin_dir / name
        link.unlink(missing_ok=True)
        link.symlink_to(path)
    logs = state_dir / "logs"
    logs.unlink(missing_ok=True)
    logs.symlink_to(cluster.workdir / "logs")
    state_file.write_text(json.dumps(cluster.state(), indent=2))
    _log(f"control plane up in {cluster.timings['total']:.1f}s at {cluster.server}")
    print(
        f"\nexport KUBECONFIG={kubeconfig.resolve()}\n"
        f"export PATH={bin_dir.resolve()}:$PATH\n"
        "kubectl get nodes -L nvidia.com/gpu.product,topology.gpusched.io/rack\n"
        "# stop it with: make cluster-down"
    )
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    state = read_state(state_dir / "state.json")
    if state is None:
        _log(f"no cluster recorded in {state_dir}/state.json; nothing to stop")
        return 0
    stop_recorded(state)
    for name in ("state.json", "kubeconfig", "logs"):
        (state_dir / name).unlink(missing_ok=True)
    _log("cluster stopped and its temp dir removed")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    state = read_state(args.state_dir / "state.json")
    versions = ", ".join(f"{k} {v}" for k, v in pinned_versions().items())
    try:
        find_binaries()
        binaries = "built"
    except BinaryNotFoundError:
        binaries = "not built (make bins)"
    print(f"pinned: {versions}; binaries: {binaries}")
    if state is None:
        print("no cluster running (make cluster-up)")
        return 1
    for name, pid in state.get("processes", {}).items():
        print(f"  {name:15} pid {pid:>7}  {'running' if _alive(int(pid)) else 'EXITED'}")
    ready = http_ok(f"{state['server']}/readyz", ca_file=Path(state["workdir"]) / "pki" / "ca.crt")
    print(f"{state['server']} readyz: {'ok' if ready else 'NOT READY'}; logs in {state['logs']}")
    return 0 if ready else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpusched.devcluster")
    parser.add_argument("--state-dir", type=Path, default=Path(".cluster"))
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a local control plane with fake GPU nodes")
    up.add_argument("--nodes", type=int, default=None, help="generated GPU nodes (default 64)")
    up.add_argument("--node-list", type=Path, help="openb node CSV instead of a generated fleet")
    up.add_argument("--no-kube-scheduler", action="store_true")
    sub.add_parser("down", help="stop the cluster started by `up`")
    sub.add_parser("status", help="show whether the cluster is running")
    sub.add_parser(
        "prometheus", help="fetch Debian's prometheus into the binary cache (make prometheus)"
    )
    args = parser.parse_args(argv)
    if args.command == "prometheus":
        # Here, not `python -m gpusched.devcluster.prometheus`: the package imports that
        # module first, and runpy warns about running a module already imported.
        return prometheus.main(["install"])
    if args.command == "up":
        args.nodes_set = args.nodes is not None
        if args.nodes is None:
            args.nodes = 64
        if args.nodes < 0:
            parser.error("--nodes must be >= 0")
        return cmd_up(args)
    if args.command == "down":
        return cmd_down(args)
    return cmd_status(args)


if __name__ == "__main__":
    sys.exit(main())

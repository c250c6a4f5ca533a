"""`gpusched run`: load the configuration, connect, run the daemon until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

from gpusched.config import ConfigError, SchedulerConfig, default_config
from gpusched.core.runtime.validate import validate_profiles
from gpusched.daemon.daemon import Daemon, DaemonOptions, Logger
from gpusched.daemon.explain import ExplainEndpoint
from gpusched.daemon.gpu_map import map_routes
from gpusched.daemon.reload import DEFAULT_POLL_SECONDS, digest, read_new_config
from gpusched.framework.registry import Registry
from gpusched.kube import faults
from gpusched.kube.client import ApiError, Kube
from gpusched.observability.logging import make_logger
from gpusched.observability.metrics import Metrics, serve
from gpusched.plugins import default_registry


@dataclass(frozen=True)
class RunArgs:
    config: str | None = None
    kubeconfig: str | None = None
    metrics_port: int = 10259
    log_level: str = "info"
    leader_elect: bool | None = None  # --leader-elect; None: leaderElection.leaderElect
    # --config-poll-seconds: how often the --config file is checked for a new version
    # (daemon/reload.py); 0 turns hot reload off.
    config_poll_seconds: float = DEFAULT_POLL_SECONDS
    # --config-map NAMESPACE/NAME (default $GPUSCHED_CONFIG_MAP): the ConfigMap the file
    # is mounted from, which a refused reload's Warning Event regards.
    config_map: str = ""
    # --gpu-map: serve GET /map and /map.json on the metrics port (docs/gpu-map.md).
    gpu_map: bool = False
    # --explain-endpoint: serve GET /explain/{namespace}/{pod} on the metrics port
    # (docs/explain.md; off by default, docs/security.md).
    explain_endpoint: bool = False


@dataclass
class Pages:
    """The read-only pages the flags turn on, served on the metrics port beside /metrics,
    and what to do when the daemon exits (a running explain search stops)."""

    routes: list[web.RouteDef]
    close: Callable[[], None]


def pages(daemon: Daemon, args: RunArgs) -> Pages:
    explain = ExplainEndpoint(daemon) if args.explain_endpoint else None
    return Pages(
        routes=[
            *(explain.routes() if explain is not None else ()),
            *(map_routes(daemon) if args.gpu_map else ()),
        ],
        close=explain.close if explain is not None else lambda: None,
    )


def effective_config(args: RunArgs, registry: Registry) -> SchedulerConfig:
    """The --config file (or the built-in profile), validated, with the flags applied.
    Raises ConfigError or OSError."""
    return _load(args, registry)[0]


def _load(args: RunArgs, registry: Registry) -> tuple[SchedulerConfig, str]:
    """effective_config and the hash of the bytes it was read from (the reload's baseline:
    the watcher compares new versions with exactly what was loaded)."""
    if not args.config:
        config = default_config(registry)
        validate_profiles(config, registry)
        return _flags(config, args), ""
    # Read once, then parsed from these bytes: a ConfigMap update between a read for the
    # hash and a read for the loader would otherwise go unnoticed by the watcher.
    data = Path(args.config).read_bytes()
    return read_new_config(data, args.config, registry, args.leader_elect), digest(data)


def _flags(config: SchedulerConfig, args: RunArgs) -> SchedulerConfig:
    if args.leader_elect is not None:
        # The flag wins over the file, as kube-scheduler's --leader-elect does.
        election = dataclasses.replace(config.leader_election, leader_elect=args.leader_elect)
        config = dataclasses.replace(config, leader_election=election)
    return config


def run_main(args: RunArgs) -> int:
    """Exit codes: 0 after a clean stop, 2 for a bad configuration, 1 if we cannot start
    or when leadership is lost (a restart re-syncs from the API). A malformed
    GPUSCHED_FAULT (kube/faults.py, tests only) is exit 2 too."""
    for flag, on in (("--gpu-map", args.gpu_map), ("--explain-endpoint", args.explain_endpoint)):
        if on and not args.metrics_port:
            print(
                f"gpusched run: {flag} is served on the metrics port: give --metrics-port a"
                " port (not 0)",
                file=sys.stderr,
            )
            return 2
    try:
        fault = faults.arm_from_env()
    except faults.FaultSpecError as exc:
        print(f"gpusched run: {exc}", file=sys.stderr)
        return 2
    if fault is not None:
        print(
            f"gpusched run: {faults.ENV} armed: kill -9 at {fault.point} #{fault.n}"
            " (fault injection for tests; never set it in production)",
            file=sys.stderr,
        )
    registry = default_registry()
    try:
        config, config_digest = _load(args, registry)
    except ConfigError as exc:
        print(
            f"gpusched run: invalid configuration {args.config or '(built-in)'}:\n{exc}\n"
            "Fix what is named above (`gpusched check-config FILE` checks a file).",
            file=sys.stderr,
        )
        return 2
    except OSError as exc:
        print(f"gpusched run: cannot read --config {args.config}: {exc}", file=sys.stderr)
        return 2
    try:
        logger = make_logger(sys.stdout, args.log_level)
    except ValueError as exc:
        print(f"gpusched run: --log-level: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_run(args, config, registry, logger, config_digest))


_CONNECT_HINT = (
    "Pass --kubeconfig FILE (after `make cluster-up`: .cluster/kubeconfig), or run in a pod"
    " with a ServiceAccount."
)
PREFLIGHT_TIMEOUT_S = 15.0


def missing_connection(kubeconfig: str | None) -> str | None:
    """Why no cluster connection can be loaded, checked before kubernetes_asyncio tries (it
    reports a missing file as "Expected key current-context"); None if there is a candidate."""
    if kubeconfig is not None:
        path = Path(kubeconfig).expanduser()
        if not path.exists():
            return f"--kubeconfig {kubeconfig}: file not found"
        if not path.is_file():
            return f"--kubeconfig {kubeconfig}: not a file"
        return None
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None  # in a pod: in-cluster config
    env = os.environ.get("KUBECONFIG")
    if env:
        if any(Path(f).expanduser().is_file() for f in env.split(os.pathsep) if f):
            return None
        return f"$KUBECONFIG={env} names no existing file"
    home = Path("~/.kube/config").expanduser()
    if not home.is_file():
        return (
            "not running in a pod (KUBERNETES_SERVICE_HOST is unset), $KUBECONFIG is unset,"
            f" and {home} does not exist"
        )
    return None


async def preflight(kube: Kube, where: str) -> str | None:
    """One GET /version: an unreachable server or rejected credentials are reported at start
    (the watches would otherwise retry them in the log forever). None if the server answers."""
    try:
        await kube.request("GET", "/version", timeout=PREFLIGHT_TIMEOUT_S)
    except ApiError as exc:
        if exc.status == 401:
            return (
                f"the API server {kube.host} rejected the credentials from {where}"
                " (HTTP 401 Unauthorized): the token or client certificate is wrong or expired."
                " Get a fresh kubeconfig (`make cluster-up` writes .cluster/kubeconfig)."
            )
        return f"the API server {kube.host} (from {where}) answered GET /version with {exc}"
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        return (
            f"cannot reach the API server {kube.host} (from {where}):"
            f" {exc or type(exc).__name__}. Check that the server is running and that the"
            " kubeconfig's server address is right."
        )
    return None


async def _run(
    args: RunArgs, config: SchedulerConfig, registry: Registry, log: Logger, config_digest: str
) -> int:
    problem = missing_connection(args.kubeconfig)
    if problem is not None:
        print(f"gpusched run: no cluster connection: {problem}.\n{_CONNECT_HINT}", file=sys.stderr)
        return 1
    where = args.kubeconfig or "in-cluster config / $KUBECONFIG / ~/.kube/config"
    try:
        kube = await Kube.connect(
            args.kubeconfig, keepalive_seconds=config.client_connection.tcp_keepalive_seconds
        )
    except Exception as exc:
        print(
            f"gpusched run: cannot load the cluster connection from {where}: {exc}\n"
            f"{_CONNECT_HINT}",
            file=sys.stderr,
        )
        return 1
    metrics = Metrics()
    instance = os.environ.get("POD_NAME") or socket.gethostname()
    async with kube:
        problem = await preflight(kube, where)
        if problem is not None:
            print(f"gpusched run: {problem}", file=sys.stderr)
            return 1
        daemon = Daemon(
            kube,
            config,
            registry,
            log,
            metrics=metrics,
            options=DaemonOptions(
                instance=instance,
                config_file=args.config or "",
                config_digest=config_digest,
                config_poll_seconds=args.config_poll_seconds,
                config_map=args.config_map or os.environ.get("GPUSCHED_CONFIG_MAP", ""),
                pod_namespace=os.environ.get("POD_NAMESPACE", ""),
                leader_elect=args.leader_elect,
            ),
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, daemon.stop)
        runner = None
        served = pages(daemon, args)
        if args.metrics_port:
            try:
                runner = await serve(
                    metrics,
                    args.metrics_port,
                    lambda: daemon.is_ready,
                    daemon.liveness.problems,
                    routes=served.routes,
                )
            except OSError as exc:
                print(
                    f"gpusched run: cannot serve /metrics on port {args.metrics_port}: {exc};"
                    " pick another --metrics-port (0 turns the server off)",
                    file=sys.stderr,
                )
                return 1
        try:
            await daemon.run()
        finally:
            served.close()  # a running explain search stops at its next dry cycle
            if runner is not None:
                await runner.cleanup()
    return 1 if daemon.failed else 0

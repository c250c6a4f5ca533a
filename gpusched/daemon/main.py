"""`gpusched run`: load the configuration, connect, run the daemon until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import socket
import sys
from dataclasses import dataclass

from gpusched.config import (
    ConfigError,
    SchedulerConfig,
    default_config,
    load_config,
    validate_profiles,
)
from gpusched.core.runtime.registry import Registry
from gpusched.daemon.daemon import Daemon, DaemonOptions, Logger
from gpusched.kube.client import Kube
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


def effective_config(args: RunArgs, registry: Registry) -> SchedulerConfig:
    """The --config file (or the built-in profile), validated, with the flags applied.
    Raises ConfigError or OSError."""
    config = load_config(args.config, registry) if args.config else default_config(registry)
    validate_profiles(config, registry)
    if args.leader_elect is not None:
        # The flag wins over the file, as kube-scheduler's --leader-elect does.
        election = dataclasses.replace(config.leader_election, leader_elect=args.leader_elect)
        config = dataclasses.replace(config, leader_election=election)
    return config


def run_main(args: RunArgs) -> int:
    """Exit codes: 0 after a clean stop, 2 for a bad configuration, 1 if we cannot start
    or when leadership is lost (a restart re-syncs from the API)."""
    registry = default_registry()
    try:
        config = effective_config(args, registry)
    except ConfigError as exc:
        print(
            f"gpusched run: invalid configuration {args.config or '(built-in)'}:\n{exc}\n"
            "Fix the field named above (`gpusched check-config FILE` checks a file).",
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
    return asyncio.run(_run(args, config, registry, logger))


async def _run(args: RunArgs, config: SchedulerConfig, registry: Registry, log: Logger) -> int:
    try:
        kube = await Kube.connect(args.kubeconfig)
    except Exception as exc:
        where = args.kubeconfig or "in-cluster config / $KUBECONFIG / ~/.kube/config"
        print(
            f"gpusched run: cannot load the cluster connection from {where}: {exc}\n"
            "Pass --kubeconfig FILE, or run in a pod with a ServiceAccount.",
            file=sys.stderr,
        )
        return 1
    metrics = Metrics()
    instance = os.environ.get("POD_NAME") or socket.gethostname()
    async with kube:
        daemon = Daemon(
            kube,
            config,
            registry,
            log,
            metrics=metrics,
            options=DaemonOptions(instance=instance),
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, daemon.stop)
        runner = None
        if args.metrics_port:
            try:
                runner = await serve(metrics, args.metrics_port, lambda: daemon.is_ready)
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
            if runner is not None:
                await runner.cleanup()
    return 1 if daemon.failed else 0

"""The local control plane: etcd, kube-apiserver, kube-controller-manager, the KWOK
controller, kube-scheduler.

Library use (tests)::

    with LocalCluster() as cluster:          # free ports, temp dir, stopped on exit
        cluster.kubeconfig                    # admin kubeconfig (a static token)

``make cluster-up`` uses the same class with ``attached=False``: the processes outlive the
command and ``make cluster-down`` stops them from the recorded state.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

from gpusched.devcluster import configs, pki
from gpusched.devcluster.binaries import REPO_ROOT, Binaries, find_binaries
from gpusched.devcluster.processes import (
    Process,
    StartError,
    free_port,
    http_ok,
    port_in_use_error,
    stop_group,
    wait_ready,
)
from gpusched.devcluster.prometheus import PrometheusServer

WORKDIR_PREFIX = "gpusched-cluster-"
# An attached cluster's temp dir names its owner; a SIGKILLed owner (its children die with
# it, PR_SET_PDEATHSIG) cannot remove the dir, so the next start sweeps such dirs.
OWNER_FILE = "owner.pid"
START_ATTEMPTS = 3  # a picked port can be taken before the child binds it; then retry
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
# kube-controller-manager runs only these (names as `kube-controller-manager --help` lists
# them for v1.36): what turns Deployments, Jobs, StatefulSets and DaemonSets into pods,
# garbage-collects dependents, empties deleted namespaces, gives every namespace its
# `default` ServiceAccount and kube-root-ca.crt, binds and protects PVCs, creates
# ResourceClaims and ephemeral PVCs for pods, keeps PDB status (eviction reads it),
# collects orphaned and terminated pods, runs CronJobs, deletes finished Jobs past their
# ttlSecondsAfterFinished, and keeps a PodGroup of scheduling.k8s.io/v1alpha2 while pods
# name it (only with the GenericWorkload feature gate, WORKLOAD_FEATURE_GATES; without it
# the controller manager skips it). NOT
# node-lifecycle-controller: KWOK nodes have heartbeats off (configs.kwok_config), so it
# would find every node's status stale, taint them NotReady/unreachable and evict their
# pods. Nothing else either (no node IPAM, no CSR signing, no service/endpoint
# controllers): nothing here needs them.
CONTROLLERS = (
    "serviceaccount-token-controller",
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "deployment-controller",
    "replicaset-controller",
    "job-controller",
    "statefulset-controller",
    "daemonset-controller",
    "disruption-controller",
    "pod-garbage-collector-controller",
    "persistentvolume-binder-controller",
    "persistentvolumeclaim-protection-controller",
    "resourceclaim-controller",
    "ephemeral-volume-controller",
    "cronjob-controller",
    "ttl-after-finished-controller",
    "podgroup-protection-controller",
)


# The alpha workload API gang scheduling builds on (scheduling.k8s.io/v1alpha2 Workload and
# PodGroup; a pod joins with spec.schedulingGroup), on in every component so they agree:
# without GenericWorkload the apiserver silently drops the pod field; WorkloadWithJob makes
# the job controller create an Indexed Job's Workload and PodGroup; GangScheduling and
# TopologyAwareWorkloadScheduling are kube-scheduler's own (it ignores pods of other
# schedulers); WorkloadAwarePreemption is preemption of whole groups.
WORKLOAD_FEATURE_GATES = (
    "GenericWorkload",
    "GangScheduling",
    "TopologyAwareWorkloadScheduling",
    "WorkloadWithJob",
    "WorkloadAwarePreemption",
)
WORKLOAD_API = "scheduling.k8s.io/v1alpha2"


@dataclass
class ClusterOptions:
    kwok: bool = True
    kube_scheduler: bool = True
    # kube-controller-manager with CONTROLLERS. Off: the old shape (no controllers, the
    # ServiceAccount admission plugin off, so pods need no `default` ServiceAccount).
    controller_manager: bool = True
    # True: children die with this process (tests). False: they outlive it (cluster-up).
    attached: bool = True
    # Where certs, etcd data and logs go; a fresh temp dir (removed on stop) when None.
    workdir: Path | None = None
    start_timeout: float = 120.0
    log: Callable[[str], None] = field(default=lambda _msg: None)
    # Extra kube-apiserver flags (appended, so a repeated flag overrides the default). Their
    # --feature-gates reach the controller manager and kube-scheduler too.
    apiserver_args: tuple[str, ...] = ()
    # WORKLOAD_API served and WORKLOAD_FEATURE_GATES on in every component.
    workload_api: bool = True
    # kube-scheduler with its shipped default profile instead of the GPU-packing baseline
    # (configs.kube_scheduler_config).
    kube_scheduler_stock: bool = False


@dataclass
class Endpoints:
    etcd: int = 0
    etcd_peer: int = 0
    apiserver: int = 0
    kwok: int = 0
    kube_scheduler: int = 0
    controller_manager: int = 0


class LocalCluster:
    def __init__(self, options: ClusterOptions | None = None) -> None:
        self.options = options or ClusterOptions()
        self.binaries: Binaries | None = None
        self.workdir = Path()
        self.ports = Endpoints()
        self.processes: list[Process] = []
        self.identities: dict[str, pki.Identity] = {}
        self.timings: dict[str, float] = {}
        self._owns_workdir = False
        self._pki: pki.Pki | None = None

    # -- public surface -------------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.etcd}"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "pki" / "ca.crt"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def crd_dir(self) -> Path:
        return REPO_ROOT / "manifests" / "crds"

    def token(self, user: str) -> str:
        return self.identities[user].token

    def kubeconfig_for(self, user: str, path: Path | None = None) -> Path:
        """A kubeconfig acting as one of the static-token users (pki.ADMIN.user, ...)."""
        path = path or self.workdir / f"{user.replace(':', '-')}.kubeconfig"
        write_kubeconfig(path, self.server, self.ca_file, self.token(user), user)
        return path

    def start(self) -> Self:
        self.binaries = find_binaries()
        if self.options.attached:
            # Also on an exception that escapes the test runner; the children's
            # PR_SET_PDEATHSIG covers a SIGKILL, which no atexit handler sees.
            atexit.register(self.stop)
        started = time.monotonic()
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._start_once()
                break
            except BaseException as exc:
                # Any failure (KeyboardInterrupt included) must not leave processes or the
                # attempt's temp dir behind; a retry starts from a fresh dir and new ports.
                self._stop_processes()
                self._remove_workdir()
                if (
                    not isinstance(exc, StartError)
                    or not port_in_use_error(exc)
                    or attempt == START_ATTEMPTS
                ):
                    raise
                self.options.log(f"port taken while starting; retrying ({exc})")
        self.timings["total"] = time.monotonic() - started
        return self

    def stop(self) -> None:
        self._stop_processes()
        self._remove_workdir()

    def start_prometheus(self, targets: Sequence[str] = ()) -> PrometheusServer:
        """A Prometheus scraping `targets` every second (devcluster/prometheus.py), its data
        in this cluster's work dir; stopped with the cluster, or earlier by
        `stop_prometheus`. Needs `make prometheus` (BinaryNotFoundError says so)."""
        workdir = Path(tempfile.mkdtemp(prefix="prometheus-", dir=self.workdir))
        server = PrometheusServer(workdir, targets, attached=self.options.attached)
        server.start()
        assert server.process is not None
        self.processes.append(server.process)
        return server

    def stop_prometheus(self, server: PrometheusServer) -> None:
        if server.process in self.processes:
            self.processes.remove(server.process)
        server.stop()

    def restart_apiserver(self, extra_args: tuple[str, ...] | None = None) -> None:
        """Stop kube-apiserver (SIGTERM: a graceful shutdown, as a rolling restart does) and
        start it again on the same port with the same certificates and tokens, so every
        kubeconfig keeps working; returns once it is ready. `extra_args` replaces
        `ClusterOptions.apiserver_args` from now on (None: keep them). Its clients see their
        connections end and requests refused meanwhile, then reconnect.

        From an event loop that must keep running meanwhile (an in-process daemon), call the
        parts: `await asyncio.to_thread(stop_apiserver)`, `start_apiserver(wait=False)` on
        the thread that started the cluster (the child dies with the thread that spawned it,
        processes.py), then `await asyncio.to_thread(wait_apiserver)`."""
        self.stop_apiserver()
        self.start_apiserver(extra_args)

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver only; etcd and the other components keep running."""
        for process in [p for p in self.processes if p.name == APISERVER]:
            process.stop()
            self.processes.remove(process)

    def start_apiserver(
        self, extra_args: tuple[str, ...] | None = None, *, wait: bool = True
    ) -> None:
        """Start kube-apiserver again after stop_apiserver, on the same port; with `wait`,
        return once it is ready (else call wait_apiserver)."""
        if any(p.name == APISERVER for p in self.processes):
            raise StartError("kube-apiserver is running: stop_apiserver first")
        if extra_args is not None:
            self.options.apiserver_args = tuple(extra_args)
        self._spawn_apiserver()
        # Keep the start order (etcd, kube-apiserver, clients): stop() goes in reverse.
        self.processes.sort(key=lambda p: {"etcd": 0, APISERVER: 1}.get(p.name, 2))
        if wait:
            self.wait_apiserver()

    def wait_apiserver(self) -> None:
        """Until kube-apiserver answers /readyz (StartError if it exits or times out)."""
        t0 = time.monotonic()
        process = next(p for p in self.processes if p.name == APISERVER)
        wait_ready(
            process,
            lambda: http_ok(
                f"{self.server}/readyz", ca_file=self.ca_file, token=self.token(pki.ADMIN.user)
            ),
            timeout=self.options.start_timeout,
            hint="The flags may not suit this kube-apiserver version; see the log.",
        )
        self._timed(APISERVER, t0)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def state(self) -> dict[str, Any]:
        """What `cluster-down`/`cluster-status` need after this process has exited."""
        return {
            "workdir": str(self.workdir),
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "processes": {p.name: p.pid for p in self.processes},
            "ports": vars(self.ports),
            "logs": str(self.workdir / "logs"),
        }

    # -- start ----------------------------------------------------------------------------

    def _start_once(self) -> None:
        assert self.binaries is not None
        if self.options.workdir is not None:
            self.workdir = self.options.workdir
            self.workdir.mkdir(parents=True, exist_ok=True)
        else:
            _sweep_stale_workdirs()
            self.workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
            self._owns_workdir = True
            if self.options.attached:
                (self.workdir / OWNER_FILE).write_text(str(os.getpid()))
        self.ports = Endpoints(*(free_port() for _ in fields(Endpoints)))

        t0 = time.monotonic()
        self._pki = pki.generate(self.workdir / "pki")
        self.identities = pki.write_token_file(
            self.workdir / "tokens.csv",
            [pki.ADMIN, pki.KUBE_SCHEDULER, pki.KUBE_CONTROLLER_MANAGER, pki.KWOK, pki.NO_RIGHTS],
        )
        write_kubeconfig(
            self.kubeconfig, self.server, self.ca_file, self.token(pki.ADMIN.user), "admin"
        )
        self._timed("pki", t0)

        self._start_etcd()
        self._start_apiserver()
        if self.options.controller_manager:
            self._start_controller_manager()
        if self.options.kwok:
            self._start_kwok()
        if self.options.kube_scheduler:
            self._start_kube_scheduler()

    def _timed(self, name: str, since: float) -> None:
        self.timings[name] = time.monotonic() - since
        self.options.log(f"{name} ready in {self.timings[name]:.1f}s")

    def _spawn(self, name: str, argv: list[str]) -> Process:
        process = Process(name, argv, self.workdir / "logs" / f"{name}.log")
        process.start(attached=self.options.attached)
        self.processes.append(process)
        return process

    def _start_etcd(self) -> None:
        assert self.binaries is not None
        t0 = time.monotonic()
        client = f"http://127.0.0.1:{self.ports.etcd}"
        peer = f"http://127.0.0.1:{self.ports.etcd_peer}"
        # Data from an earlier start (a given workdir, or a retry) names other peer URLs,
        # which etcd refuses; every start is a new throwaway cluster.
        shutil.rmtree(self.workdir / "etcd", ignore_errors=True)
        process = self._spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=devcluster",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=devcluster={peer}",
                # A throwaway cluster: losing data on a crash is fine, fsync latency is not.
                "--unsafe-no-fsync",
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
        )
        wait_ready(
            process,
            lambda: http_ok(f"{client}/health"),
            timeout=self.options.start_timeout,
            hint="Check that the data dir is writable.",
        )
        self._timed("etcd", t0)

    def _start_apiserver(self) -> None:
        self._spawn_apiserver()
        self.wait_apiserver()

    def _spawn_apiserver(self) -> None:
        assert self.binaries is not None
        assert self._pki is not None
        p = self._pki
        self._spawn(
            APISERVER,
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{self.ports.etcd}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.ports.apiserver}",
                f"--cert-dir={self.workdir / 'apiserver'}",
                f"--tls-cert-file={p.serving_cert}",
                f"--tls-private-key-file={p.serving_key}",
                f"--token-auth-file={self.workdir / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={p.sa_public_key}",
                f"--service-account-signing-key-file={p.sa_private_key}",
                "--service-cluster-ip-range=10.96.0.0/16",
                # No node-lifecycle-controller runs (see CONTROLLERS), so nothing would lift
                # the not-ready taint TaintNodesByCondition puts on new nodes. ServiceAccount
                # is on when serviceaccount-controller runs to create each namespace's
                # `default` ServiceAccount. ValidatingAdmissionPolicy stays on (a default
                # plugin since 1.30; the log lists it under "validating admission
                # controller(s)"): tests/integration/test_admission.py applies
                # manifests/admission/.
                "--disable-admission-plugins="
                + (
                    "TaintNodesByCondition"
                    if self.options.controller_manager
                    else "ServiceAccount,TaintNodesByCondition"
                ),
                # Endpoints may not hold a loopback address, so the reconciler that publishes
                # the apiserver's own address would only log errors.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                *self._workload_api_args(),
                *self.options.apiserver_args,
            ],
        )

    def feature_gates(self) -> list[str]:
        """The --feature-gates flags kube-apiserver gets (the workload gates, then those of
        ClusterOptions.apiserver_args), for the components that must agree with it. A
        repeated --feature-gates adds to the earlier ones (component-base's map flag)."""
        own = (
            [f"--feature-gates={','.join(f'{g}=true' for g in WORKLOAD_FEATURE_GATES)}"]
            if self.options.workload_api
            else []
        )
        return own + [a for a in self.options.apiserver_args if a.startswith("--feature-gates=")]

    def _workload_api_args(self) -> list[str]:
        """kube-apiserver's flags for the workload API (the gates are in feature_gates)."""
        if not self.options.workload_api:
            return []
        return [f"--runtime-config={WORKLOAD_API}=true", *self.feature_gates()[:1]]

    def _start_controller_manager(self) -> None:
        assert self.binaries is not None
        assert self._pki is not None
        t0 = time.monotonic()
        kubeconfig = self.kubeconfig_for(pki.KUBE_CONTROLLER_MANAGER.user)
        port = self.ports.controller_manager
        process = self._spawn(
            CONTROLLER_MANAGER,
            [
                str(self.binaries.kube_controller_manager),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                # Tokens only, no client CA: the apiserver publishes no
                # extension-apiserver-authentication ConfigMap to look up.
                "--authentication-skip-lookup=true",
                # Each controller with its own service account and system:controller:* role.
                "--use-service-account-credentials=true",
                f"--controllers={','.join(CONTROLLERS)}",
                # The token controller signs legacy token Secrets with the key the apiserver
                # verifies; the publisher and the token controller hand out this CA.
                f"--service-account-private-key-file={self._pki.sa_private_key}",
                f"--root-ca-file={self.ca_file}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / CONTROLLER_MANAGER}",
                # Tests write fast; the default qps (20) would make the controllers lag.
                "--kube-api-qps=500",
                "--kube-api-burst=1000",
                "--profiling=false",
                *self.feature_gates(),
            ],
        )
        wait_ready(
            process,
            lambda: http_ok(f"https://127.0.0.1:{port}/healthz"),
            timeout=self.options.start_timeout,
            hint="The flags or controller names may not suit this version; see the log.",
        )
        self._timed(CONTROLLER_MANAGER, t0)

    def _start_kwok(self) -> None:
        assert self.binaries is not None
        t0 = time.monotonic()
        config = self.workdir / "kwok.yaml"
        config.write_text(configs.kwok_config())
        kubeconfig = self.kubeconfig_for(pki.KWOK.user)
        address = f"127.0.0.1:{self.ports.kwok}"
        process = self._spawn(
            "kwok",
            [
                str(self.binaries.kwok),
                f"--kubeconfig={kubeconfig}",
                f"--config={config}",
                f"--server-address={address}",
            ],
        )
        wait_ready(
            process,
            lambda: http_ok(f"http://{address}/healthz"),
            timeout=self.options.start_timeout,
        )
        self._timed("kwok", t0)

    def start_kube_scheduler(self, *, qps: int = 500, burst: int = 1000) -> Process:
        """kube-scheduler on a cluster started without it (ClusterOptions.kube_scheduler
        False), with its client's qps/burst: a benchmark starts it once its backlog exists
        (bench/throughput.py). Returns once /healthz answers."""
        return self._start_kube_scheduler(qps=qps, burst=burst)

    def _start_kube_scheduler(self, *, qps: int = 500, burst: int = 1000) -> Process:
        assert self.binaries is not None
        t0 = time.monotonic()
        kubeconfig = self.kubeconfig_for(pki.KUBE_SCHEDULER.user)
        config = self.workdir / "kube-scheduler.yaml"
        config.write_text(
            configs.kube_scheduler_config(
                kubeconfig, qps=qps, burst=burst, stock=self.options.kube_scheduler_stock
            )
        )
        process = self._spawn(
            "kube-scheduler",
            [
                str(self.binaries.kube_scheduler),
                f"--config={config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports.kube_scheduler}",
                f"--cert-dir={self.workdir / 'kube-scheduler'}",
                *self.feature_gates(),
            ],
        )
        wait_ready(
            process,
            lambda: http_ok(f"https://127.0.0.1:{self.ports.kube_scheduler}/healthz"),
            timeout=self.options.start_timeout,
        )
        self._timed("kube-scheduler", t0)
        return process

    # -- stop -----------------------------------------------------------------------------

    def _stop_processes(self) -> None:
        # Reverse order: clients first, so nothing logs errors about a vanished apiserver.
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()

    def _remove_workdir(self) -> None:
        if self._owns_workdir and self.workdir != Path():
            shutil.rmtree(self.workdir, ignore_errors=True)
            self._owns_workdir = False


def _sweep_stale_workdirs() -> None:
    for directory in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        try:
            owner = int((directory / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # a detached cluster (no owner file) or not ours: leave it
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(directory, ignore_errors=True)
        except PermissionError:
            pass


def stop_recorded(state: dict[str, Any]) -> None:
    """Stop what a detached `cluster-up` started, from its recorded state."""
    for pid in reversed(list(state.get("processes", {}).values())):
        stop_group(int(pid))
    workdir = state.get("workdir")
    if workdir and Path(workdir).name.startswith(WORKDIR_PREFIX):
        shutil.rmtree(workdir, ignore_errors=True)


def write_kubeconfig(path: Path, server: str, ca_file: Path, token: str, user: str) -> None:
    """A self-contained kubeconfig (CA inlined), so a copy keeps working elsewhere."""
    ca = base64.b64encode(ca_file.read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "gpusched-dev",
                "cluster": {"server": server, "certificate-authority-data": ca},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": "gpusched-dev", "context": {"cluster": "gpusched-dev", "user": user}}
        ],
        "current-context": "gpusched-dev",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def read_state(path: Path) -> dict[str, Any] | None:
    with contextlib.suppress(OSError, ValueError):
        state = json.loads(path.read_text())
        if isinstance(state, dict):
            return state
    return None

"""The kopf operator embedded in `gpusched run`: it writes PodGroup status and ElasticQuota
`status.used` while this replica holds the leader Lease.

kopf's embedding recipe (kopf.readthedocs.io "Embedding"): `kopf.operator(...)` in a
thread of its own with its own event loop, stopped through `stop_flag`; clusterwide, and
standalone (no peering objects: the Lease already makes one writer). What it touches:

* watches both PodGroup APIs (when gangs are scheduled) and ElasticQuotas (when the CRD is
  served) through kopf (`on.event` handlers: they need no finalizer,
  keep no progress, write no annotation); progress and diff-base stores are in memory
  anyway, so no handler could ever write kopf's annotations;
* no Events from kopf (`settings.posting.enabled = False`: the daemon posts its own);
* resource scanning off (`settings.scanning.disabled`): kopf discovers the served APIs
  once at start through /apis (public discovery) and needs no RBAC on
  customresourcedefinitions or namespaces; an API installed later is served from the next
  leadership (restart);
* credentials: `on.login` hands kopf the daemon's own (kubeconfig or in-cluster token,
  the latter re-read on each login, as the daemon's client does);
* writes, through a client of its own on this thread's loop: `podgroups/status` merge
  patches (only when the computed status differs from the object's, status.py) and, for
  x-k8s PodGroups, a FailedScheduling Event when the reason they wait changes;
  `elasticquotas/status` merge patches of `used` (only when it differs) and the Warning
  Events the daemon reports for a quota (InvalidQuota, MinimumsExceedCluster), each once
  per message.

What to write comes from the GangBoard and the QuotaBoard the daemon publishes (board.py,
quota_board.py); a board change wakes exactly the objects it names, kopf's events wake the
object that changed, and one worker per kind writes them in turn, so nothing polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import aiohttp
import kopf
from kubernetes_asyncio import client as k8s_client

from gpusched.kube.client import ApiError, Kube
from gpusched.kube.podgroups import (
    COSCHEDULING_GROUP,
    COSCHEDULING_VERSION,
    WORKLOAD_GROUP,
    WORKLOAD_VERSION,
    pod_group_from_k8s,
    pod_group_path,
)
from gpusched.kube.quotas import GROUP as QUOTA_GROUP
from gpusched.kube.quotas import PLURAL as QUOTAS
from gpusched.kube.quotas import VERSION as QUOTA_VERSION
from gpusched.kube.quotas import elastic_quota_path
from gpusched.kube.writer import ClusterWriter, ObjectRef
from gpusched.model.pod import GangAPI
from gpusched.operator.board import GangBoard, Index
from gpusched.operator.quota_board import QuotaBoard
from gpusched.operator.status import (
    COSCHEDULING_FIELDS,
    coscheduling_status,
    merge_patch,
    waiting_message,
    workload_conditions,
)

log = logging.getLogger(__name__)

RETRY_SECONDS = 5.0  # a failed write is tried again this much later (or at the next change)
_NET_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)


class MemoryProgressStorage(kopf.ProgressStorage):
    """kopf's handler progress, kept in this process (never on the objects)."""

    def __init__(self) -> None:
        super().__init__()
        self._records: dict[tuple[str, str], kopf.ProgressRecord] = {}

    def fetch(self, *, key: Any, body: Any) -> kopf.ProgressRecord | None:
        return self._records.get((str(body.metadata.uid), str(key)))

    def store(self, *, key: Any, record: kopf.ProgressRecord, body: Any, patch: Any) -> None:
        self._records[(str(body.metadata.uid), str(key))] = copy.deepcopy(record)

    def purge(self, *, key: Any, body: Any, patch: Any) -> None:
        self._records.pop((str(body.metadata.uid), str(key)), None)

    def touch(self, *, body: Any, patch: Any, value: str | None) -> None:
        return None

    def clear(self, *, essence: Any) -> Any:
        return super().clear(essence=essence)


class MemoryDiffBaseStorage(kopf.DiffBaseStorage):
    """kopf's last-handled state, kept in this process (never an annotation)."""

    def __init__(self) -> None:
        super().__init__()
        self._essences: dict[str, Any] = {}

    def fetch(self, *, body: Any) -> Any:
        return self._essences.get(str(body.metadata.uid))

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        self._essences[str(body.metadata.uid)] = copy.deepcopy(essence)


def operator_settings() -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False
    settings.scanning.disabled = True
    settings.persistence.progress_storage = MemoryProgressStorage()
    settings.persistence.diffbase_storage = MemoryDiffBaseStorage()
    return settings


async def connection_info(configuration: Any) -> kopf.ConnectionInfo:
    """kopf's credentials from the daemon's kubernetes_asyncio Configuration: server, CA,
    client certificate, or bearer token (an in-cluster token is re-read from its file by
    the configuration's refresh hook, so a rotated token is picked up at the next login)."""
    header = await configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
    scheme, token = None, None
    if header:
        parts = str(header).split(" ", 1)
        scheme, token = (parts[0], parts[1]) if len(parts) == 2 else ("Bearer", parts[0])
    return kopf.ConnectionInfo(
        server=str(configuration.host),
        ca_path=configuration.ssl_ca_cert or None,
        insecure=not configuration.verify_ssl,
        username=configuration.username or None,
        password=configuration.password or None,
        scheme=scheme,
        token=token,
        certificate_path=configuration.cert_file or None,
        private_key_path=configuration.key_file or None,
    )


def _index(api: GangAPI, raw: Mapping[str, Any]) -> Index:
    meta = raw.get("metadata") or {}
    return api, f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _rv(raw: Mapping[str, Any]) -> int:
    try:
        return int((raw.get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


class StatusOperator:
    """Start with `start()` (from any thread); `await stop()` from the daemon's loop."""

    def __init__(
        self,
        board: GangBoard | None,
        configuration: Any,
        *,
        instance: str = "",
        qps: float = 50.0,
        burst: int = 100,
        clock: Callable[[], float] = time.time,
        quota_board: QuotaBoard | None = None,
    ) -> None:
        """`board`: PodGroup status to write (None: none); `quota_board`: ElasticQuota
        status.used and Warning Events to write (None: none)."""
        self.board = board or GangBoard()
        self.quota_board = quota_board
        self._gangs = board is not None
        self.configuration = configuration
        self.instance = instance
        self.qps = qps
        self.burst = burst
        self.clock = clock
        self.ready = threading.Event()  # kopf started (set by kopf's ready_flag)
        self.writes = 0  # status patches sent (tests, metrics)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._objects: dict[Index, dict[str, Any]] = {}
        self._told: dict[Index, tuple[str, str]] = {}  # x-k8s waiting Events written
        self._queue: asyncio.Queue[Index] | None = None
        self._queued: set[Index] = set()
        self._kube: Kube | None = None
        self._writer: ClusterWriter | None = None
        # ElasticQuotas: the last seen object, the Warning Events written (reason, message),
        # and their own work queue (a quota's key is "namespace/name", a gang's an Index).
        self._quota_objects: dict[str, dict[str, Any]] = {}
        self._quota_told: dict[str, set[tuple[str, str]]] = {}
        self._quota_queue: asyncio.Queue[str] | None = None
        self._quota_queued: set[str] = set()
        self.registry = self._registry()

    # -- lifecycle (the daemon's side) ------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the status operator runs once; make a new one")
        self._thread = threading.Thread(target=self._main, name="podgroup-status", daemon=True)
        self._thread.start()

    async def stop(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        """Ask kopf to stop and wait (in a worker thread) for the operator's thread, at
        most `timeout` seconds. No write starts after the stop flag is set, so a caller
        may go on (give up the Lease) before kopf has finished: kopf's own shutdown can
        take seconds (its discovery requests retry with backoff while it is starting)."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join, timeout)
            if thread.is_alive():
                log.info("the PodGroup status operator is still stopping after %.1fs", timeout)

    # -- the operator's thread --------------------------------------------------------------

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except Exception:
            log.exception("the PodGroup status operator failed")

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue()
        # A client of this loop's own (aiohttp sessions are bound to their loop), with the
        # daemon's credentials.
        self._kube = Kube(k8s_client.ApiClient(self.configuration))
        self._writer = ClusterWriter(
            self._kube, qps=self.qps, burst=self.burst, instance=self.instance
        )
        self._quota_queue = asyncio.Queue()
        unsubscribe = self.board.subscribe(self._wake)
        worker = asyncio.create_task(self._work(), name="podgroup status writer")
        unsubscribe_quotas = (
            self.quota_board.subscribe(self._wake_quotas) if self.quota_board else lambda: None
        )
        quota_worker = asyncio.create_task(self._work_quotas(), name="elasticquota status writer")
        try:
            await kopf.operator(
                registry=self.registry,
                settings=operator_settings(),
                clusterwide=True,
                standalone=True,
                stop_flag=self._stop,
                ready_flag=self.ready,
            )
        finally:
            unsubscribe()
            unsubscribe_quotas()
            worker.cancel()
            quota_worker.cancel()
            await asyncio.gather(worker, quota_worker, return_exceptions=True)
            await self._kube.close()

    def _registry(self) -> kopf.OperatorRegistry:
        registry = kopf.OperatorRegistry()
        configuration = self.configuration

        @kopf.on.login(registry=registry)
        async def login(**_: Any) -> kopf.ConnectionInfo:
            return await connection_info(configuration)

        if self._gangs:

            @kopf.on.event(COSCHEDULING_GROUP, COSCHEDULING_VERSION, "podgroups", registry=registry)
            async def coscheduling(event: Mapping[str, Any], **_: Any) -> None:
                self._observe(GangAPI.COSCHEDULING, event)

            @kopf.on.event(WORKLOAD_GROUP, WORKLOAD_VERSION, "podgroups", registry=registry)
            async def workload(event: Mapping[str, Any], **_: Any) -> None:
                self._observe(GangAPI.WORKLOAD, event)

        if self.quota_board is not None:

            @kopf.on.event(QUOTA_GROUP, QUOTA_VERSION, QUOTAS, registry=registry)
            async def elasticquota(event: Mapping[str, Any], **_: Any) -> None:
                self._observe_quota(event)

        return registry

    def _observe(self, api: GangAPI, event: Mapping[str, Any]) -> None:
        """A PodGroup listed, added, changed or deleted (kopf's watch)."""
        raw = event.get("object")
        if not isinstance(raw, dict):
            return
        index = _index(api, raw)
        if event.get("type") == "DELETED":
            self._objects.pop(index, None)
            self._told.pop(index, None)
            return
        known = self._objects.get(index)
        if known is None or _rv(raw) >= _rv(known):
            self._objects[index] = copy.deepcopy(raw)
        self._enqueue([index])

    def _wake(self, changed: frozenset[Index]) -> None:
        """The board changed (called on the daemon's thread): hand the keys to our loop."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        # RuntimeError: the loop closed meanwhile (we are stopping); nothing to wake.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._enqueue, changed)

    def _enqueue(self, indexes: Iterable[Index]) -> None:
        if self._queue is None:
            return
        for index in indexes:
            if index not in self._queued:
                self._queued.add(index)
                self._queue.put_nowait(index)

    async def _work(self) -> None:
        assert self._queue is not None
        while True:
            index = await self._queue.get()
            self._queued.discard(index)
            try:
                await self._reconcile(index)
            except Exception:
                log.exception("PodGroup %s: writing its status raised", index[1])
                self._retry(index)

    def _retry(self, index: Index) -> None:
        if self._loop is not None:
            self._loop.call_later(RETRY_SECONDS, self._enqueue, [index])

    async def _reconcile(self, index: Index) -> None:
        raw = self._objects.get(index)
        api, key = index
        if raw is None:
            if self.board.get(api, key) is None:
                return  # nothing to write: kopf's watch brings it when there is
            # The board has news of a PodGroup kopf's watch has not listed (yet): its
            # first list can lag far behind the scheduler on a loaded machine, and the
            # status must not wait for it. Read it once; kopf's events take over after.
            raw = await self._read(index)
            if raw is None:
                return  # deleted (or not created yet): a later change wakes it again
            self._objects[index] = raw
        group = pod_group_from_k8s(raw, api)
        report = self.board.get(api, key)
        status = raw.get("status") if isinstance(raw.get("status"), dict) else {}
        assert status is not None
        meta = raw.get("metadata") or {}
        if api is GangAPI.COSCHEDULING:
            desired = coscheduling_status(status, group.min_member, report)
            patch = merge_patch(status, desired, COSCHEDULING_FIELDS)
            if patch:
                await self._patch_status(index, {"status": patch})
            waiting = waiting_message(group.min_member, report)
            if waiting is not None and self._told.get(index) != waiting:
                self._told[index] = waiting
                await self._event(index, raw, *waiting)
            return
        conditions = status.get("conditions")
        new = workload_conditions(
            conditions if isinstance(conditions, list) else [],
            group,
            report,
            int(meta.get("generation") or 0),
            self.clock(),
        )
        if new is not None:
            # Conditions are one list in a merge patch: conditional on the version we
            # computed from, so a condition someone else set meanwhile is not lost (409:
            # the watch brings the new object and we compute again).
            body = {
                "metadata": {"resourceVersion": meta.get("resourceVersion")},
                "status": {"conditions": new},
            }
            await self._patch_status(index, body)

    async def _read(self, index: Index) -> dict[str, Any] | None:
        assert self._kube is not None
        api, key = index
        namespace, name = key.split("/", 1)
        try:
            raw = await self._kube.get(pod_group_path(api, namespace, name))
        except ApiError as exc:
            if exc.status != 404:
                log.warning("PodGroup %s: reading it failed: %s", key, exc)
                self._retry(index)
            return None
        except _NET_ERRORS as exc:
            log.warning("PodGroup %s: reading it failed: %r", key, exc)
            self._retry(index)
            return None
        return dict(raw)

    async def _patch_status(self, index: Index, body: Mapping[str, Any]) -> None:
        assert self._kube is not None
        if self._stop.is_set():
            return  # stopping (the Lease is being given up): no write after this point
        api, key = index
        namespace, name = key.split("/", 1)
        path = pod_group_path(api, namespace, name) + "/status"
        try:
            raw = await self._kube.merge_patch(path, body)
        except ApiError as exc:
            if exc.status == 404:
                return  # deleted meanwhile
            if exc.status == 409:
                self._enqueue([index])
                return
            if exc.status in (401, 403):
                log.error(
                    "PodGroup %s: status write refused (HTTP %s: %s); grant the scheduler's"
                    " ServiceAccount patch on podgroups/status (manifests/rbac/gpusched.yaml)",
                    key,
                    exc.status,
                    exc.message,
                )
            else:
                log.warning("PodGroup %s: status write failed: %s", key, exc)
            self._retry(index)
            return
        except _NET_ERRORS as exc:
            log.warning("PodGroup %s: status write failed: %r", key, exc)
            self._retry(index)
            return
        self.writes += 1
        known = self._objects.get(index)
        if known is not None and _rv(raw) >= _rv(known):
            self._objects[index] = raw

    async def _event(self, index: Index, raw: Mapping[str, Any], reason: str, message: str) -> None:
        assert self._writer is not None
        if self._stop.is_set():
            return
        meta = raw.get("metadata") or {}
        ref = ObjectRef(
            "PodGroup",
            str(meta.get("namespace", "")),
            str(meta.get("name", "")),
            str(meta.get("uid", "")),
            api_version=f"{COSCHEDULING_GROUP}/{COSCHEDULING_VERSION}",
        )
        await self._writer.event(ref, "Warning", reason, message)

    # -- ElasticQuota status.used and Warning Events ----------------------------------------

    def _observe_quota(self, event: Mapping[str, Any]) -> None:
        """An ElasticQuota listed, added, changed or deleted (kopf's watch)."""
        raw = event.get("object")
        if not isinstance(raw, dict):
            return
        meta = raw.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        if event.get("type") == "DELETED":
            self._quota_objects.pop(key, None)
            self._quota_told.pop(key, None)
            return
        known = self._quota_objects.get(key)
        if known is None or _rv(raw) >= _rv(known):
            if known is not None and (known.get("metadata") or {}).get("uid") != meta.get("uid"):
                self._quota_told.pop(key, None)  # re-created: its Events are new again
            self._quota_objects[key] = copy.deepcopy(raw)
        self._enqueue_quotas([key])

    def _wake_quotas(self, changed: frozenset[str]) -> None:
        """The quota board changed (called on the daemon's thread)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._enqueue_quotas, changed)

    def _enqueue_quotas(self, keys: Iterable[str]) -> None:
        if self._quota_queue is None:
            return
        for key in keys:
            if key not in self._quota_queued:
                self._quota_queued.add(key)
                self._quota_queue.put_nowait(key)

    async def _work_quotas(self) -> None:
        assert self._quota_queue is not None
        while True:
            key = await self._quota_queue.get()
            self._quota_queued.discard(key)
            try:
                await self._reconcile_quota(key)
            except Exception:
                log.exception("ElasticQuota %s: writing its status raised", key)
                self._retry_quota(key)

    def _retry_quota(self, key: str) -> None:
        if self._loop is not None:
            self._loop.call_later(RETRY_SECONDS, self._enqueue_quotas, [key])

    async def _reconcile_quota(self, key: str) -> None:
        if self.quota_board is None:
            return
        report = self.quota_board.get(key)
        if report is None:
            return  # the daemon does not know it (yet): its publish wakes it
        raw = self._quota_objects.get(key)
        if raw is None:
            # As for PodGroups: kopf's first list may lag behind the daemon's watch.
            raw = await self._read_quota(key)
            if raw is None:
                return
            self._quota_objects[key] = raw
        status = raw.get("status") if isinstance(raw.get("status"), dict) else {}
        assert status is not None
        current = status.get("used") if isinstance(status.get("used"), dict) else {}
        assert current is not None
        desired = dict(report.used)
        if dict(current) != desired:
            # A merge patch merges maps: a name no longer reported is removed with null.
            used: dict[str, Any] = {name: None for name in current if name not in desired}
            used.update(desired)
            await self._patch_quota_status(key, {"status": {"used": used}})
        told = self._quota_told.setdefault(key, set())
        for reason, message in report.warnings:
            if (reason, message) not in told:
                told.add((reason, message))
                await self._quota_event(raw, reason, message)

    async def _read_quota(self, key: str) -> dict[str, Any] | None:
        assert self._kube is not None
        namespace, name = key.split("/", 1)
        try:
            raw = await self._kube.get(elastic_quota_path(namespace, name))
        except ApiError as exc:
            if exc.status != 404:
                log.warning("ElasticQuota %s: reading it failed: %s", key, exc)
                self._retry_quota(key)
            return None
        except _NET_ERRORS as exc:
            log.warning("ElasticQuota %s: reading it failed: %r", key, exc)
            self._retry_quota(key)
            return None
        return dict(raw)

    async def _patch_quota_status(self, key: str, body: Mapping[str, Any]) -> None:
        assert self._kube is not None
        if self._stop.is_set():
            return  # stopping (the Lease is being given up): no write after this point
        namespace, name = key.split("/", 1)
        try:
            raw = await self._kube.merge_patch(
                elastic_quota_path(namespace, name) + "/status", body
            )
        except ApiError as exc:
            if exc.status == 404:
                return  # deleted meanwhile
            if exc.status in (401, 403):
                log.error(
                    "ElasticQuota %s: status write refused (HTTP %s: %s); grant the"
                    " scheduler's ServiceAccount patch on elasticquotas/status"
                    " (manifests/rbac/gpusched.yaml)",
                    key,
                    exc.status,
                    exc.message,
                )
            else:
                log.warning("ElasticQuota %s: status write failed: %s", key, exc)
            self._retry_quota(key)
            return
        except _NET_ERRORS as exc:
            log.warning("ElasticQuota %s: status write failed: %r", key, exc)
            self._retry_quota(key)
            return
        self.writes += 1
        known = self._quota_objects.get(key)
        if known is None or _rv(raw) >= _rv(known):
            self._quota_objects[key] = dict(raw)

    async def _quota_event(self, raw: Mapping[str, Any], reason: str, message: str) -> None:
        assert self._writer is not None
        if self._stop.is_set():
            return
        meta = raw.get("metadata") or {}
        ref = ObjectRef(
            "ElasticQuota",
            str(meta.get("namespace", "")),
            str(meta.get("name", "")),
            str(meta.get("uid", "")),
            api_version=f"{QUOTA_GROUP}/{QUOTA_VERSION}",
        )
        await self._writer.event(ref, "Warning", reason, message)

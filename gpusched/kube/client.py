"""A raw-JSON client over kubernetes_asyncio's ApiClient.

kubernetes_asyncio handles kubeconfig, in-cluster config, TLS and token refresh; its generated
models we skip: they cost a deserialisation per object on the hot path, and some of them fail
on valid answers (POST pods/{name}/binding answers with a Status, which the generated
create_namespaced_pod_binding turns into V1Binding and rejects with "target must not be
None", kubernetes-client/python#547). So every call here sends raw JSON on its aiohttp
session, with its headers and auth (`Kube._send`), and returns decoded JSON dicts.

Every connection to the API server has TCP keepalive on (kubernetes_asyncio's connector has
none, and Linux's default first probe is after 2 hours): a peer that vanished without a FIN
(a node or load balancer gone) is noticed in about a minute on an idle or waiting
connection, as client-go's dialer (KeepAlive 30 s) notices it.
"""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self
from urllib.parse import urlencode

import aiohttp
import orjson
from aiohappyeyeballs import AddrInfoType, SocketFactoryType
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from gpusched.kube import faults

JSON = dict[str, Any]
Query = Sequence[tuple[str, str | int]]
WatchType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]

_AUTH = ["BearerToken"]
# TCP keepalive: the first probe after this many idle seconds, then KEEPALIVE_PROBES probes a
# third of it apart; a dead peer is given up after about twice this (60 s by default).
KEEPALIVE_SECONDS = 30.0
KEEPALIVE_PROBES = 3
# request/_send take a timeout (noqa ASYNC109): it is aiohttp's per-request socket timeout,
# which a watch must be able to switch off while ordinary calls keep one.


class ApiError(Exception):
    """A non-2xx answer; ``status`` is the HTTP code (409 Conflict, 404 NotFound, 403, ...)."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.body = body
        self.reason = ""
        self.message = body.strip()[:500]
        try:
            decoded = orjson.loads(body)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict) and decoded.get("kind") == "Status":
            self.reason = str(decoded.get("reason", ""))
            self.message = str(decoded.get("message", self.message))
        super().__init__(f"{method} {path}: HTTP {status} {self.reason}: {self.message}")


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: WatchType
    object: JSON


def set_keepalive(sock: socket.socket, idle_seconds: float = KEEPALIVE_SECONDS) -> None:
    """TCP keepalive on `sock`: first probe after `idle_seconds` of silence, then
    KEEPALIVE_PROBES probes idle/3 apart before the kernel fails the connection."""
    idle = max(1, int(idle_seconds))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    # Linux names; macOS has TCP_KEEPALIVE for the idle time. Where absent, the system's.
    for name, value in (
        ("TCP_KEEPIDLE", idle),
        ("TCP_KEEPINTVL", max(1, idle // 3)),
        ("TCP_KEEPCNT", KEEPALIVE_PROBES),
    ):
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


def keepalive_socket_factory(idle_seconds: float = KEEPALIVE_SECONDS) -> SocketFactoryType:
    """An aiohttp TCPConnector `socket_factory`: a socket with keepalive from the start."""

    def factory(addr_info: AddrInfoType) -> socket.socket:
        family, type_, proto, _, _ = addr_info
        sock = socket.socket(family=family, type=type_, proto=proto)
        try:
            set_keepalive(sock, idle_seconds)
        except OSError:
            sock.close()
            raise
        return sock

    return factory


# The variables aiohttp's trust_env reads proxies from (either case).
_PROXY_VARIABLES = ("https_proxy", "http_proxy", "all_proxy", "ws_proxy", "wss_proxy")


def proxy_in_env() -> bool:
    """Whether a proxy is configured in the environment: only then does the session trust
    it. kubernetes_asyncio's session always did, and trust_env also makes aiohttp look up
    ~/.netrc for every request that has no aiohttp auth (ours carry their own Authorization
    header) in a worker thread: a thread hop and a file read per Binding and Event, 12 % of
    the daemon's CPU under a backlog (bench/throughput.py --profile)."""
    return any(os.environ.get(v) or os.environ.get(v.upper()) for v in _PROXY_VARIABLES)


def _ssl_context(configuration: Any) -> ssl.SSLContext:
    """The TLS context kubernetes_asyncio's RESTClientObject builds from a Configuration."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if configuration.disable_strict_ssl_verification:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


def _use_keepalive(api_client: Any, idle_seconds: float) -> None:
    """Swap kubernetes_asyncio's HTTP session (built in ApiClient's constructor, no
    keepalive, no hook to add it) for one whose connector opens keepalive sockets, with the
    same TLS, pool size and read buffer, and the hooks an armed fault needs (kube/faults.py;
    none normally). The old session has opened nothing yet: detaching it closes it without
    an unclosed-session warning."""
    rest = api_client.rest_client
    configuration = api_client.configuration
    old: aiohttp.ClientSession = rest.pool_manager
    connector = aiohttp.TCPConnector(
        limit=configuration.connection_pool_maxsize,
        ssl=_ssl_context(configuration),
        socket_factory=keepalive_socket_factory(idle_seconds),
    )
    # read_bufsize as kubernetes_asyncio: a watch event can carry a 1.5 MiB object.
    rest.pool_manager = aiohttp.ClientSession(
        connector=connector,
        trust_env=proxy_in_env(),
        read_bufsize=2**21,
        trace_configs=faults.trace_configs() or None,
    )
    old.detach()


class Kube:
    """One connection pool to one API server. Use as ``async with Kube.from_kubeconfig(...)``."""

    def __init__(self, api_client: Any, *, keepalive_seconds: float = KEEPALIVE_SECONDS) -> None:
        self.api_client = api_client
        _use_keepalive(api_client, keepalive_seconds)

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | os.PathLike[str] | None = None,
        *,
        context: str | None = None,
        keepalive_seconds: float = KEEPALIVE_SECONDS,
    ) -> Kube:
        """From a kubeconfig path; without one, in-cluster config when running in a pod, else
        $KUBECONFIG / ~/.kube/config as kubectl does."""
        configuration = k8s_client.Configuration()
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            # Untyped in kubernetes_asyncio; called through Any, the one place we need it.
            load_incluster: Any = k8s_config.load_incluster_config
            load_incluster(client_configuration=configuration)
        else:
            # None: kubernetes_asyncio's default, $KUBECONFIG (merged when it lists several
            # files) or ~/.kube/config.
            await k8s_config.load_kube_config(
                config_file=None if kubeconfig is None else str(kubeconfig),
                context=context,
                client_configuration=configuration,
            )
        return cls(k8s_client.ApiClient(configuration), keepalive_seconds=keepalive_seconds)

    @classmethod
    def with_token(cls, host: str, token: str, ca_file: str | os.PathLike[str]) -> Kube:
        """Same server, another identity (tests use it to act as a user without rights)."""
        configuration = k8s_client.Configuration()
        configuration.host = host
        configuration.ssl_ca_cert = str(ca_file)
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return cls(k8s_client.ApiClient(configuration))

    async def close(self) -> None:
        await self.api_client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        query: Query = (),
        content_type: str = "application/json",
        timeout: aiohttp.ClientTimeout | float | None = None,  # noqa: ASYNC109
    ) -> aiohttp.ClientResponse:
        """One request on the session, as kubernetes_asyncio's call_api + RESTClientObject
        would send it for a JSON body (its headers and auth, the rest client's proxy and
        server name), without their per-request layers: every header, query pair and body
        walked by sanitize_for_serialization, the body dumped by the stdlib json, a regex
        per Content-Type. 7 % of the daemon's CPU under a backlog (bench/throughput.py
        --profile), for the Binding and the Event of every pod."""
        api = self.api_client
        headers = {**api.default_headers, "Content-Type": content_type}
        headers["Accept"] = "application/json"
        if api.cookie:
            headers["Cookie"] = api.cookie
        # The configuration's auth (a refreshed token when it has a refresh hook).
        await api.update_params_for_auth(headers, None, _AUTH)
        url = api.configuration.host + path
        if query:
            url += "?" + urlencode(list(query))
        if timeout is None or isinstance(timeout, aiohttp.ClientTimeout):
            client_timeout = timeout or aiohttp.ClientTimeout()
        else:
            client_timeout = aiohttp.ClientTimeout(total=timeout)
        rest = api.rest_client
        extra: dict[str, Any] = {}
        if rest.proxy:
            extra["proxy"] = rest.proxy
        if rest.proxy_headers:
            extra["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            extra["server_hostname"] = rest.server_hostname
        data = None if body is None else orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
        response: aiohttp.ClientResponse = await rest.pool_manager.request(
            method, url, headers=headers, data=data, timeout=client_timeout, **extra
        )
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        query: Query = (),
        content_type: str = "application/json",
        timeout: float | None = 60.0,  # noqa: ASYNC109
    ) -> JSON:
        """One call; the decoded JSON answer, or ApiError for a non-2xx status."""
        response = await self._send(
            method, path, body=body, query=query, content_type=content_type, timeout=timeout
        )
        async with response:
            raw = await response.read()
            if not 200 <= response.status < 300:
                raise ApiError(method, path, response.status, raw.decode(errors="replace"))
        if not raw:
            return {}
        decoded = orjson.loads(raw)
        return decoded if isinstance(decoded, dict) else {"items": decoded}

    async def get(self, path: str, *, query: Query = ()) -> JSON:
        return await self.request("GET", path, query=query)

    async def post(self, path: str, body: object, *, query: Query = ()) -> JSON:
        return await self.request("POST", path, body=body, query=query)

    async def delete(self, path: str, *, query: Query = (), body: object = None) -> JSON:
        return await self.request("DELETE", path, query=query, body=body)

    async def merge_patch(self, path: str, patch: Mapping[str, Any]) -> JSON:
        return await self.request(
            "PATCH", path, body=dict(patch), content_type="application/merge-patch+json"
        )

    async def watch(
        self,
        path: str,
        *,
        resource_version: str,
        query: Query = (),
        timeout_seconds: int = 300,
    ) -> AsyncGenerator[WatchEvent, None]:
        """Events of ``path`` (a collection) after ``resource_version``, until the server ends
        the watch (after ``timeout_seconds``). An ERROR event (410 Gone when the version is
        compacted) is yielded, not raised: the caller re-lists, as an informer does."""
        params: list[tuple[str, str | int]] = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", timeout_seconds),
            *query,
        ]
        # No total timeout: a watch is meant to stay open; the server closes it.
        response = await self._send(
            "GET", path, query=params, timeout=aiohttp.ClientTimeout(total=None)
        )
        async with response:
            if response.status != 200:
                raise ApiError("WATCH", path, response.status, await response.text())
            buffer = b""
            # Objects can be larger than aiohttp's readline limit, so split lines ourselves.
            async for chunk in response.content.iter_any():
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    line, buffer = buffer[:end], buffer[end + 1 :]
                    if line.strip():
                        event = orjson.loads(line)
                        yield WatchEvent(type=event["type"], object=event["object"])

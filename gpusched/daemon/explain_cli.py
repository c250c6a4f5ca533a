"""`gpusched explain NAMESPACE/POD` (and `kubectl gpusched explain`): ask the running
scheduler's endpoint when given one (--endpoint, or $GPUSCHED_EXPLAIN_ENDPOINT), else
compute offline from the API with the same code (daemon/explain.py)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from typing import Any

import aiohttp

from gpusched.daemon.explain import Answer, explain_offline
from gpusched.daemon.main import RunArgs, effective_config, missing_connection, preflight
from gpusched.explain.render import human
from gpusched.kube.client import Kube
from gpusched.plugins import default_registry

ENDPOINT_ENV = "GPUSCHED_EXPLAIN_ENDPOINT"
EXIT_EXPLAINED = 0
EXIT_REFUSED = 1  # the pod does not exist, is bound, is not ours; or no connection
EXIT_USAGE = 2


@dataclass(frozen=True)
class ExplainArgs:
    target: str  # NAMESPACE/POD, or POD with `namespace`
    namespace: str = ""
    kubeconfig: str | None = None
    config: str | None = None
    endpoint: str = ""
    output: str = "text"


def split_target(target: str, namespace: str) -> tuple[str, str] | None:
    if "/" in target:
        ns, _, name = target.partition("/")
        if not ns or not name or "/" in name or (namespace and namespace != ns):
            return None
        return ns, name
    if not target:
        return None
    return namespace or "default", target


def explain_main(args: ExplainArgs) -> int:
    where = split_target(args.target, args.namespace)
    if where is None:
        print(
            f"gpusched explain: {args.target!r}: expected NAMESPACE/POD (or POD with -n)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    namespace, name = where
    endpoint = args.endpoint or os.environ.get(ENDPOINT_ENV, "")
    try:
        if endpoint:
            status, body = asyncio.run(_from_endpoint(endpoint, namespace, name))
        else:
            got = _offline(args, namespace, name)
            if isinstance(got, int):
                return got
            status, body = got
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        source = f"the endpoint {endpoint}" if endpoint else "the API server"
        print(f"gpusched explain: cannot reach {source}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    if status != 200:
        print(f"gpusched explain: {body.get('error', body)}", file=sys.stderr)
        if args.output == "json":
            print(json.dumps(body, indent=2))
        return EXIT_REFUSED
    print(
        json.dumps(body, indent=2) if args.output == "json" else human(body),
        end="\n" if args.output == "json" else "",
    )
    return EXIT_EXPLAINED


async def _from_endpoint(endpoint: str, namespace: str, name: str) -> tuple[int, dict[str, Any]]:
    url = f"{endpoint.rstrip('/')}/explain/{namespace}/{name}"
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as resp:
        try:
            body = await resp.json(content_type=None)
        except ValueError:
            body = None
        if not isinstance(body, dict) or ("error" not in body and resp.status != 200):
            # Not one of our answers: aiohttp's own "404: Not Found" when the route is not
            # served at all (the daemon runs without --explain-endpoint), or not gpusched.
            text = (await resp.text())[:200]
            if resp.status == 404:
                return 404, {
                    "error": f"{endpoint} does not serve /explain (GET {url}: HTTP 404:"
                    f" {text}): the scheduler runs without --explain-endpoint (off by"
                    " default); start `gpusched run` with it, or leave --endpoint (and"
                    f" ${ENDPOINT_ENV}) out to compute offline from the API",
                    "reason": "NoEndpoint",
                }
            body = {"error": f"GET {url}: HTTP {resp.status}: {text}"}
        return resp.status, body


def _offline(args: ExplainArgs, namespace: str, name: str) -> Answer | int:
    registry = default_registry()
    try:
        config = effective_config(RunArgs(config=args.config), registry)
    except (ValueError, OSError) as exc:
        print(f"gpusched explain: --config {args.config}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    problem = missing_connection(args.kubeconfig)
    if problem is not None:
        print(f"gpusched explain: no cluster connection: {problem}", file=sys.stderr)
        return EXIT_REFUSED

    async def run() -> Answer | int:
        kube = await Kube.connect(args.kubeconfig)
        async with kube:
            problem = await preflight(kube, args.kubeconfig or "the default kubeconfig")
            if problem is not None:
                print(f"gpusched explain: {problem}", file=sys.stderr)
                return EXIT_REFUSED
            return await explain_offline(kube, config, registry, namespace, name)

    return asyncio.run(run())

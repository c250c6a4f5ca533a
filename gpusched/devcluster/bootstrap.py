"""What a fresh control plane gets before use: the project's CRDs and the fake GPU fleet."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import aclosing
from pathlib import Path

import yaml

from gpusched.devcluster.nodes import FLEET_LABEL, NodeSpec, node_objects
from gpusched.kube import JSON, Kube, create_nodes, create_or_replace, has_condition, wait_for

FLEET_SELECTOR = f"{FLEET_LABEL}=true"
CRD_COLLECTION = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def read_crds(crd_dir: Path) -> list[JSON]:
    """The CustomResourceDefinitions in ``crd_dir``/*.yaml (small files, read at startup)."""
    docs: list[JSON] = []
    for path in sorted(crd_dir.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                docs.append(doc)
    if not docs:
        raise FileNotFoundError(f"no CustomResourceDefinition in {crd_dir}/*.yaml")
    return docs


# The wait helpers take a timeout (ASYNC109) rather than leave it to asyncio.timeout so that
# the error can name what was awaited and the last state seen.
async def install_crds(kube: Kube, crd_dir: Path, *, timeout: float = 60.0) -> list[str]:  # noqa: ASYNC109
    """Apply every CRD in ``crd_dir`` and wait until each is Established (served), so the
    caller can create PodGroups right after. Returns the CRD names."""
    names: list[str] = []
    for doc in read_crds(crd_dir):
        await create_or_replace(kube, CRD_COLLECTION, doc)
        names.append(doc["metadata"]["name"])
    for name in names:
        await wait_for(
            kube,
            CRD_COLLECTION,
            name,
            lambda crd: has_condition(crd, "Established"),
            timeout=timeout,
            what="CRD Established",
        )
    return names


async def load_nodes(kube: Kube, specs: Sequence[NodeSpec], *, concurrency: int = 16) -> int:
    """Create the fleet's Node objects (KWOK then marks them Ready). Returns how many were
    new; nodes that already exist are left alone, so loading twice is harmless."""
    return await create_nodes(kube, node_objects(specs), concurrency=concurrency)


async def wait_nodes_ready(
    kube: Kube,
    names: Sequence[str],
    *,
    label_selector: str = FLEET_SELECTOR,
    timeout: float = 120.0,  # noqa: ASYNC109
) -> None:
    """Wait until every node in ``names`` reports Ready (KWOK's node-initialize stage), by
    listing once and then watching; re-lists if the watch ends. TimeoutError names the
    nodes still not Ready."""
    pending = set(names)

    async def run() -> None:
        query = [("labelSelector", label_selector)]
        while pending:
            listing = await kube.get("/api/v1/nodes", query=query)
            for node in listing.get("items", []):
                if has_condition(node, "Ready"):
                    pending.discard(node["metadata"]["name"])
            if not pending:
                return
            version = str(listing["metadata"]["resourceVersion"])
            events = kube.watch("/api/v1/nodes", resource_version=version, query=query)
            async with aclosing(events):  # close the connection on early return
                async for event in events:
                    if event.type == "ERROR":
                        break
                    if event.type in ("ADDED", "MODIFIED") and has_condition(event.object, "Ready"):
                        pending.discard(event.object["metadata"]["name"])
                        if not pending:
                            return

    try:
        await asyncio.wait_for(run(), timeout)
    except TimeoutError:
        sample = ", ".join(sorted(pending)[:5])
        raise TimeoutError(
            f"{len(pending)} node(s) not Ready after {timeout:.0f}s (e.g. {sample}); "
            "is the KWOK controller running? See its log (kwok.log)."
        ) from None

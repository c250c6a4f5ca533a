"""KubeVolumes: the storage indexes the watches keep, the change callbacks, the waiters."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from gpusched.kube.volumes import CLAIMS, CLASSES, CSI_NODES, VOLUMES, KubeVolumes
from gpusched.kube.watch import EventType
from gpusched.model.volume import CSINode
from tests.builders import claim, pv, storage_class


def volumes() -> tuple[KubeVolumes, list[str]]:
    seen: list[str] = []
    # The reflectors are built but never run here: the handlers are driven directly.
    return KubeVolumes(None, on_change=seen.append), seen  # type: ignore[arg-type]


def test_indexes_follow_adds_updates_and_deletes() -> None:
    kv, seen = volumes()
    kv._on_volume(EventType.ADDED, pv("a", "fast"))
    kv._on_volume(EventType.ADDED, pv("b", "fast"))
    assert [v.name for v in kv.volumes_of_class("fast")] == ["a", "b"]
    # A volume's class changes (the beta annotation edited): it moves index.
    kv._on_volume(EventType.MODIFIED, pv("a", "slow"))
    assert [v.name for v in kv.volumes_of_class("fast")] == ["b"]
    assert [v.name for v in kv.volumes_of_class("slow")] == ["a"]
    kv._on_volume(EventType.DELETED, pv("b", "fast"))
    assert kv.volume("b") is None and "fast" not in kv.by_class
    kv._on_claim(EventType.ADDED, claim("c"))
    assert kv.claim("ns", "c") == claim("c")
    kv._on_claim(EventType.DELETED, replace(claim("c"), uid="an-older-one"))
    assert kv.claim("ns", "c") is not None  # a stale delete does not drop the new claim
    kv._on_claim(EventType.DELETED, claim("c"))
    assert kv.claim("ns", "c") is None
    kv._on_class(EventType.ADDED, storage_class())
    kv._on_csi_node(EventType.ADDED, CSINode("n1", {"d": 2}))
    assert kv.storage_class("local") is not None and kv.csi_node("n1") == CSINode("n1", {"d": 2})
    # Deletions wake nobody in the queue: fewer objects never make a pod schedulable.
    assert seen == [VOLUMES, VOLUMES, VOLUMES, CLAIMS, CLASSES, CSI_NODES]


def test_changed_wakes_on_a_claim_or_volume_event_and_times_out_otherwise() -> None:
    kv, _ = volumes()

    async def scenario() -> tuple[bool, bool]:
        # The event arrives after the waiter registered (changed() registers before it
        # first suspends), as a watch line would.
        asyncio.get_running_loop().call_soon(kv._on_claim, EventType.MODIFIED, claim("c"))
        woke = await kv.changed(30)
        quiet = await kv.changed(0.01)
        return woke, quiet

    assert asyncio.run(scenario()) == (True, False)
    assert kv._waiters == []

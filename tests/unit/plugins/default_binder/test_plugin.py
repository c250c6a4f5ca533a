"""DefaultBinder: binds through the cluster port and returns its Status."""

from __future__ import annotations

from gpusched.framework import BindPlugin, Code, CycleState, Status
from gpusched.plugins.default_binder import DefaultBinder
from tests.builders import node, pod, snapshot
from tests.fakes import FakeHandle


async def test_binds_through_the_cluster_port() -> None:
    handle = FakeHandle(snapshot(node("n1")))
    plugin = DefaultBinder(None, handle)
    assert isinstance(plugin, BindPlugin)
    st = await plugin.bind(CycleState(), pod("p"), "n1")
    assert st.is_success()
    assert handle.cluster.binds == [("ns/p", "n1")]


async def test_passes_the_ports_failure_through() -> None:
    handle = FakeHandle(snapshot(node("n1")))
    handle.cluster.answer = Status(Code.ERROR, ('pods "p" not found',))
    st = await DefaultBinder(None, handle).bind(CycleState(), pod("p"), "n1")
    assert st.code is Code.ERROR
    assert st.reasons == ('pods "p" not found',)

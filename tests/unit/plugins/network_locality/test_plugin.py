"""NetworkLocality through the real framework: a job stays in its rack."""

from __future__ import annotations

from tests.builders import ai_pod, ai_sim, gpu_node


def test_network_locality_keeps_a_job_in_its_rack() -> None:
    nodes = [gpu_node(f"r{r}n{i}", cards=8, rack=f"rack{r}") for r in range(3) for i in range(2)]
    s = ai_sim(*nodes)
    first = s.submit(ai_pod("j0", job="job", gpu_cards=8))
    rack = first.node[:2]
    for i in range(1, 2):
        d = s.submit(ai_pod(f"j{i}", job="job", gpu_cards=8))
        assert d.node.startswith(rack)

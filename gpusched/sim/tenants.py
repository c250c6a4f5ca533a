"""Tenants for traces that have none (the openb traces): seeded, in bursts, and the
figures that say how each tenant's GPUs are spread over nodes.

**Bursts.** Teams submit work in bursts (a sweep, a batch of jobs), not one pod at a time
in turn. The arrival sequence is cut into runs whose lengths are geometric with mean
`mean_burst` pods, and each run goes to a tenant drawn uniformly from `tenants`, both from
NumPy's PCG64 seeded with (seed, 14): the same seed gives the same tenants, whatever the
policy. A run's pods are one tenant's namespace (`tenant-<k>`).

**Spread.** `concentration`: over nodes holding GPUs, the GPU-weighted mean of the share of
a node's allocated GPU held by its largest tenant (1.0: every node serves one tenant, so
a node lost is one tenant's loss; 1/T when T tenants share every node evenly).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

_STREAM = 14  # the issue that introduced tenants: keeps this stream apart from others


def tenant_name(k: int) -> str:
    return f"tenant-{k}"


def burst_tenants(n: int, tenants: int, seed: int, mean_burst: float = 32.0) -> list[str]:
    """The tenant of each of `n` arrivals (module docstring)."""
    if tenants <= 0:
        raise ValueError(f"tenants must be positive, got {tenants}")
    if mean_burst < 1:
        raise ValueError(f"mean_burst must be at least 1, got {mean_burst}")
    rng = np.random.Generator(np.random.PCG64([seed, _STREAM]))
    out: list[str] = []
    while len(out) < n:
        length = int(rng.geometric(1.0 / mean_burst))
        out.extend([tenant_name(int(rng.integers(tenants)))] * length)
    return out[:n]


def concentration(held: Iterable[tuple[str, str, int]]) -> float:
    """The concentration of placements given as (tenant, node, milli-GPU); NaN when none
    holds a GPU."""
    by_node: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for tenant, node, milli in held:
        if milli > 0:
            by_node[node][tenant] += milli
    total = sum(sum(t.values()) for t in by_node.values())
    if total == 0:
        return float("nan")
    return sum(max(t.values()) for t in by_node.values()) / total


def namespaces(names: Sequence[str]) -> list[str]:
    """The distinct tenants of `names`, sorted (reports list them in this order)."""
    return sorted(set(names), key=lambda t: (len(t), t))

"""``domain_gather``: each row's value of its topology domain, added up over several keys.

The read-back of ``domain_counts``: ``out[n] += per_domain[domains[n]]`` for every row in a
domain, nothing for a row without the key (``domains[n] == -1``). Called once per topology
key, it sums a row's score over the keys as kube-scheduler's InterPodAffinity Score does
(``for tpKey, tpValues := range topologyScore``), or tells a Filter whether the row's
domain holds a matching pod (``out > 0``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import njit_kernel


@njit_kernel
def domain_gather_nb(
    domains: npt.NDArray[np.int32],
    per_domain: npt.NDArray[np.int64],
    out: npt.NDArray[np.int64],
) -> None:
    """``out[n] += per_domain[domains[n]]`` where ``domains[n] >= 0``; ``out`` is not
    cleared, so several keys add up."""
    for n in range(domains.shape[0]):
        d = domains[n]
        if d >= 0:
            out[n] += per_domain[d]


def domain_gather_np(
    domains: npt.NDArray[np.int32],
    per_domain: npt.NDArray[np.int64],
    out: npt.NDArray[np.int64],
) -> None:
    has = domains >= 0
    out[has] += per_domain[domains[has]]

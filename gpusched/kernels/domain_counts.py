"""``domain_counts``: per-node values summed per topology domain.

A topology domain is a value of a node label (``topology.kubernetes.io/zone=a``); every row
of the snapshot is in at most one domain per key: ``domains[n]`` is the row's domain id, -1
when the node lacks the key (or the row is empty). Given a per-row value (how many pods on
the node match a selector, a score weight), ``out[d]`` becomes the sum over the rows of
domain ``d`` where ``eligible`` holds (PodTopologySpread counts only the nodes that pass its
node inclusion policies; InterPodAffinity passes every row).

InterPodAffinity (``topologyToMatchedTermCount``) and PodTopologySpread (``TpPairToMatchNum``)
both reduce to this; ``domain_gather`` reads the result back per row.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import njit_kernel


@njit_kernel
def domain_counts_nb(
    domains: npt.NDArray[np.int32],
    values: npt.NDArray[np.int64],
    eligible: npt.NDArray[np.bool_],
    out: npt.NDArray[np.int64],
) -> None:
    """``out[d] = sum(values[n] for n if domains[n] == d and eligible[n])``; ``out`` is
    cleared first and must have one slot per domain id."""
    for d in range(out.shape[0]):
        out[d] = 0
    for n in range(domains.shape[0]):
        d = domains[n]
        if d >= 0 and eligible[n]:
            out[d] += values[n]


def domain_counts_np(
    domains: npt.NDArray[np.int32],
    values: npt.NDArray[np.int64],
    eligible: npt.NDArray[np.bool_],
    out: npt.NDArray[np.int64],
) -> None:
    take = (domains >= 0) & eligible
    out[:] = 0
    # add.at, not bincount: bincount's weights are float64, inexact past 2**53.
    np.add.at(out, domains[take], values[take])

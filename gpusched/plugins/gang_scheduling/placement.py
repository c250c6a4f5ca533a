"""Where a whole gang goes: the fewest racks, then the fewest spines, best fit.

Pure functions over per-row counts ("how many of the gang's pods fit on this node now",
kernels/gang_fit.py) and the snapshot's topology columns. Placing the gang pod by pod greedily
would spread it over whichever racks the first pods happened to pick; choosing the domain
for the whole gang first, and then letting the pods score nodes inside it, keeps a job in one
rack whenever any rack can hold it (best fit: the rack it fills most), else in one spine with
as few racks as possible, else in as few racks as possible across the cluster.

Fewest racks for a need n over racks of capacity c: take racks largest first until they hold
n (no other choice of fewer racks can hold n); then, for a tighter fit, the last rack taken is
swapped for the smallest rack that still completes n. Ties go to the lowest rack id, so runs
are reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

Counts = NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Choice:
    """The racks chosen for a gang: ids in the rack numbering passed in."""

    racks: tuple[int, ...]
    spines: int  # how many spines those racks span
    leftover: int  # pods of this shape the chosen racks could hold beyond the need
    # The rows of the required domain chosen (None: no domain): a rack may straddle
    # domains (a zone label that cuts across racks), and the gang must stay inside one.
    within: NDArray[np.bool_] | None = field(default=None, compare=False)

    def key(self) -> tuple[int, int, int]:
        return (len(self.racks), self.spines, self.leftover)


def fewest_racks(caps: Counts, need: int) -> tuple[tuple[int, ...], int] | None:
    """The fewest racks whose capacities `caps` (indexed by rack id) sum to at least `need`,
    tightest among those found; None when all of them together cannot. Returns (rack ids,
    leftover)."""
    if need <= 0:
        return (), 0
    # Stable sort by capacity descending, ids ascending among equals.
    order = np.lexsort((np.arange(len(caps)), -caps))
    order = order[caps[order] > 0]
    if len(order) == 0:
        return None
    cum = np.cumsum(caps[order])
    if cum[-1] < need:
        return None
    k = int(np.searchsorted(cum, need)) + 1
    base = int(cum[k - 2]) if k >= 2 else 0
    rest = order[k - 1 :]
    # The smallest remaining rack that completes the need (the largest one always does).
    fits = rest[caps[rest] >= need - base]
    last = int(fits[np.lexsort((fits, caps[fits]))[0]])
    chosen = tuple(sorted([int(r) for r in order[: k - 1]] + [last]))
    return chosen, base + int(caps[last]) - need


def choose(
    counts: Counts,
    rack: NDArray[np.int64],
    spine: NDArray[np.int64],
    need: int,
    domain: NDArray[np.int64] | None = None,
) -> Choice | None:
    """The racks for a gang of `need` pods, given per-row `counts` and each row's `rack` and
    `spine` ids (>= 0; rows without a label get a pseudo id of their own tier).

    `domain` (per row, -1 = excluded): a required topology domain (the upstream PodGroup's
    key, or the `gpusched.io/topology-required` tier): the gang must fit inside one domain;
    among those that can hold it, the fewest racks, then spines, then the least leftover.
    Without it: one spine if any spine can hold the gang with as few racks as the whole
    cluster needs, else the fewest racks anywhere."""
    if need <= 0 or len(counts) == 0:
        return None
    n_racks = int(rack.max()) + 1
    rack_spine = np.full(n_racks, -1, np.int64)
    rack_spine[rack] = spine  # a rack's rows share one spine (the last row's wins otherwise)
    best: Choice | None = None

    def consider(rows: NDArray[np.bool_], within: NDArray[np.bool_] | None = None) -> None:
        nonlocal best
        caps = np.bincount(rack[rows], weights=counts[rows], minlength=n_racks).astype(np.int64)
        found = fewest_racks(caps, need)
        if found is None:
            return
        racks, leftover = found
        spines = len({int(rack_spine[r]) for r in racks})
        choice = Choice(racks, spines, leftover, within)
        if best is None or choice.key() < best.key():
            best = choice

    positive = counts > 0
    if domain is not None:
        for d in np.unique(domain[positive & (domain >= 0)]):
            consider(positive & (domain == d), domain == d)
        return best
    for s in np.unique(spine[positive]):
        consider(positive & (spine == s))
    consider(positive)
    return best


def slots(counts: Counts, rows_in: NDArray[np.bool_], need: int) -> dict[int, int]:
    """A virtual placement of `need` pods on the rows `rows_in`: the fullest rows first (the
    fewest nodes), as many as each holds. What other gangs see as held while this gang
    assembles."""
    rows = np.flatnonzero(rows_in & (counts > 0))
    order = rows[np.lexsort((rows, -counts[rows]))]
    out: dict[int, int] = {}
    left = need
    for r in order.tolist():
        if left <= 0:
            break
        take = min(int(counts[r]), left)
        out[r] = take
        left -= take
    return out

"""The tie-break between equally scored nodes: one rule for the daemon and the simulator.

Every node gets a fixed rank from a hash of (seed, node name); among the top-scoring nodes
the lowest rank wins. Deterministic: the same cluster and pods give the same placements in
the daemon, after a restart, and in the simulator, which is what lets a policy measured in
the simulator be the policy that runs. It also packs: ties keep landing on the same nodes
in a fixed order instead of being spread at random (kube-scheduler's selectHost picks
uniformly), which on the FGD protocol is worth about 0.6 points of unallocated GPU
(docs/fgd-results.md). Only the leader binds, so two replicas never herd onto the same
node by sharing this order.
"""

from __future__ import annotations

import hashlib

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.interfaces import Handle, Rows

RULE = "seeded node order"
_LAST = 2**64 - 1  # an empty row (never among the ties: only valid rows are scored)


def node_rank(seed: int, name: str) -> int:
    """The node's place in the seeded order: the first 8 bytes of BLAKE2b("seed/name")."""
    digest = hashlib.blake2b(f"{seed}/{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class SeededNodeOrder:
    """Picks the tied row whose node ranks first; the ranks are recomputed only when a node
    is added or removed (the snapshot's membership), not on label changes: GPU Feature
    Discovery rewrites a timestamp label every minute on every node."""

    __slots__ = ("_handle", "_how", "_membership", "_rank", "seed")

    def __init__(self, handle: Handle, seed: int = 0) -> None:
        self._handle = handle
        self.seed = seed
        self._how = f'lowest BLAKE2b rank of "{seed}/<node name>"; deterministic, not random'
        self._membership = -1
        self._rank: NDArray[np.uint64] = np.zeros(0, np.uint64)

    def __call__(self, ties: Rows) -> int:
        if len(ties) == 1:
            return int(ties[0])
        snap = self._handle.snapshot
        if snap.membership != self._membership or len(self._rank) < snap.capacity:
            self._rank = np.array(
                [node_rank(self.seed, n) if n else _LAST for n in snap.names], np.uint64
            )
            self._membership = snap.membership
        return int(ties[np.argmin(self._rank[ties])])

    def describe(self, node: str) -> dict[str, object]:
        """The rule and its input for the decision record: the seed and the chosen node's
        rank (hex), enough to check by hand (node_rank) why it came first among its ties.
        From the node's name, not its row: the record is written after binding, when the
        row may hold another node."""
        return {
            "rule": RULE,
            "seed": self.seed,
            "rank": f"{node_rank(self.seed, node):016x}",
            "how": self._how,
        }

"""`gpusched run` with the FGD simulator's tie-break, for bench/fgd_cluster.py only.

    GPUSCHED_BENCH_TIE_RANK=ranks.json python bench/fgd_cluster_daemon.py run --kubeconfig ...

The daemon breaks score ties uniformly at random (Framework._random_tie_break); the FGD
protocol's simulator takes the first top node in a seeded node order
(gpusched.sim.fgd_protocol.first_in_order). Until one deterministic rule replaces both
(issue 9, "One tie-break rule"), this starts the unmodified daemon CLI with every
Framework's tie_break set to that order, read from a JSON file {node name: rank}, so the
benchmark can measure every *other* difference. Nothing else is changed; without the
environment variable this is exactly `gpusched run`. Remove once the rule lands.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np

from gpusched.cli import main
from gpusched.core.runtime import framework

RANK_ENV = "GPUSCHED_BENCH_TIE_RANK"


def install(ranks: dict[str, int]) -> None:
    unranked = np.iinfo(np.int64).max
    original = framework.Framework.__init__

    def init(self: framework.Framework, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        handle = self.handle

        def first_in_order(ties: Any) -> int:
            # Rows are the daemon's snapshot rows (API list order), so rank by node name.
            names = handle.snapshot.names
            return int(min(ties, key=lambda row: ranks.get(names[int(row)], unranked)))

        self.tie_break = first_in_order

    framework.Framework.__init__ = init  # type: ignore[method-assign]


if __name__ == "__main__":
    path = os.environ.get(RANK_ENV)
    if path:
        with open(path) as handle:
            install({str(k): int(v) for k, v in json.load(handle).items()})
        print(f"fgd_cluster_daemon: tie-break = seeded node order from {path}", file=sys.stderr)
    sys.exit(main(sys.argv[1:]))

"""The quota board: what the daemon knows of each ElasticQuota object, for the operator.

The daemon's event loop publishes a `QuotaReport` per ElasticQuota ("namespace/name")
whenever its tenant's usage, the quota objects, a Namespace's tenant or the cluster's
capacity change (daemon/quota_status.py); the operator's thread reads them. As the
GangBoard (board.py): a lock guards the map, and subscribers are called after each publish,
outside the lock, with the keys whose report changed, so nothing polls.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpusched.operator.board import Board

# Warning Events on an ElasticQuota (reason, message pairs of QuotaReport.warnings).
MINIMUMS_EXCEED_CLUSTER = "MinimumsExceedCluster"
INVALID_QUOTA = "InvalidQuota"


@dataclass(frozen=True, slots=True)
class QuotaReport:
    key: str  # "namespace/name"
    tenant: str
    # status.used: the tenant's usage over the resources the object's min or max names,
    # plus nvidia.com/gpu, as quantity strings (model/quota.py render).
    used: Mapping[str, str] = field(default_factory=dict)
    # (reason, message) of each Warning Event the object should carry now.
    warnings: tuple[tuple[str, str], ...] = ()


class QuotaBoard(Board[str, QuotaReport]):
    def __init__(self) -> None:
        super().__init__(lambda r: r.key)

    def get(self, key: str) -> QuotaReport | None:
        return self.report(key)

"""Every known pod of every gang, pending or placed: what the gang plugin counts.

The cache holds only placed pods (bound or assumed) and the queue only pending ones; a gang
needs both (PreEnqueue waits until minMember pods exist, Permit until minMember are placed).
ClusterEvents keeps this index from the same pod events the cache and the queue get, in the
daemon and the simulator alike. Terminating and finished pods leave it: they will never run
as gang members again (a Job makes a new pod instead).

Phase counts per gang (pending, placed, running, succeeded, failed) are kept for the PodGroup
status the operator writes; succeeded and failed count only what this process saw finish
(the pod watch lists no finished pods after a restart).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from gpusched.model.pod import GangAPI, PodInfo


@dataclass(slots=True)
class GangPods:
    members: dict[str, PodInfo] = field(default_factory=dict)  # uid -> latest version
    succeeded: int = 0
    failed: int = 0
    # Unix seconds the first member was seen: the gang's place in the queue when its
    # PodGroup object is not (yet) known.
    first_seen: float = 0.0


class GangIndex:
    def __init__(self) -> None:
        self._gangs: dict[str, GangPods] = {}
        self._of: dict[str, str] = {}  # pod uid -> gang key

    def update(self, pod: PodInfo) -> bool:
        """A pod added or updated; True if its gang gained a member (a new live pod)."""
        uid = pod.uid
        old_key = self._of.get(uid)
        key = pod.gang.name if pod.gang is not None else None
        if old_key is not None and old_key != key:
            self._drop(uid, old_key)
            old_key = None
        if key is None:
            return False
        gang = self._gangs.get(key)
        if pod.terminal or pod.deleting:
            if gang is not None and uid in gang.members:
                del gang.members[uid]
                self._of.pop(uid, None)
                if pod.phase == "Succeeded":
                    gang.succeeded += 1
                elif pod.phase == "Failed":
                    gang.failed += 1
                if (
                    not gang.members
                    and pod.gang is not None
                    and pod.gang.api is GangAPI.ANNOTATIONS
                ):
                    del self._gangs[key]  # no object to report the counts on
            return False
        if gang is None:
            gang = self._gangs[key] = GangPods(first_seen=pod.created)
        new = uid not in gang.members
        gang.members[uid] = pod
        self._of[uid] = key
        if pod.created and (not gang.first_seen or pod.created < gang.first_seen):
            gang.first_seen = pod.created
        return new

    def forget(self, key: str) -> None:
        """The gang's PodGroup object was deleted: its finished counts go with it (they are
        kept only to report on that object)."""
        gang = self._gangs.get(key)
        if gang is not None and not gang.members:
            del self._gangs[key]

    def remove(self, uid: str) -> None:
        key = self._of.get(uid)
        if key is not None:
            self._drop(uid, key)

    def _drop(self, uid: str, key: str) -> None:
        self._of.pop(uid, None)
        gang = self._gangs.get(key)
        if gang is None:
            return
        gang.members.pop(uid, None)
        if not gang.members and not gang.succeeded and not gang.failed:
            del self._gangs[key]

    def members(self, key: str) -> Sequence[PodInfo]:
        gang = self._gangs.get(key)
        return tuple(gang.members.values()) if gang is not None else ()

    def get(self, key: str) -> GangPods | None:
        return self._gangs.get(key)

    def gang_of(self, uid: str) -> str | None:
        return self._of.get(uid)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._gangs))

    def __len__(self) -> int:
        return len(self._gangs)

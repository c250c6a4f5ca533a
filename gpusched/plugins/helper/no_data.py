"""How a Score plugin says it had no data for a node (NO_DATA in the cycle state): its
score there is a neutral stand-in, and the decision record and the `Scheduled` Event say
"no data" for the chosen node instead of showing that number as if it were measured."""

from __future__ import annotations

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import NO_DATA, NoData


def mark_no_data(state: CycleState, plugin: str, test: NoData) -> None:
    """Register `test(row, index)` (True: no data for that row) for `plugin`; the
    record calls it for the chosen row only. It answers from what Score kept (arrays Score
    computed, never the snapshot's columns): the record is written after binding or a
    gang's wait at Permit, when the readings may have changed and the row may hold
    another node."""
    tests = state.get(NO_DATA)
    if tests is None:
        tests = {}
        state.write(NO_DATA, tests)
    tests[plugin] = test


def always(row: int, index: int) -> bool:
    """The test of a plugin that had no data for any node this attempt."""
    return True

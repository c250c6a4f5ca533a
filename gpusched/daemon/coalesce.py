"""Publish once per event-loop turn: the status publishers gather what changed while the
watches deliver a burst of events and write their board once, at the end of the turn."""

from __future__ import annotations

import asyncio


class CoalescedFlush:
    def __init__(self) -> None:
        self._flush_pending = False

    def flush(self) -> None:
        raise NotImplementedError

    def _schedule(self) -> None:
        """flush() at the end of this loop turn (once, however many changes came)."""
        if self._flush_pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a unit test): flush() by hand
        self._flush_pending = True
        loop.call_soon(self._flush_now)

    def _flush_now(self) -> None:
        self._flush_pending = False
        self.flush()

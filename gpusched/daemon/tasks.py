"""The daemon's asyncio tasks other than its core loops: one per binding cycle, and the
side writes (Events, conditions) that must not hold up scheduling."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

Logger = structlog.typing.FilteringBoundLogger


class Tasks:
    def __init__(self, log: Logger) -> None:
        self.log = log
        self.bindings: set[asyncio.Task[Any]] = set()
        self.side: set[asyncio.Task[None]] = set()

    def bind(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        """A binding cycle; kept until done so shutdown can wait for it."""
        task = asyncio.create_task(coro, name=name)
        self.bindings.add(task)
        task.add_done_callback(self._binding_done)

    def _binding_done(self, task: asyncio.Task[Any]) -> None:
        self.bindings.discard(task)
        # ScheduleOne.bind handles its own failures; an exception here is a bug to see.
        if not task.cancelled() and task.exception() is not None:
            self.log.error(
                "binding task raised", task=task.get_name(), error=repr(task.exception())
            )

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """A side write; a failure is logged, never raised into the scheduler."""
        task = asyncio.create_task(coro, name=name)
        self.side.add(task)
        task.add_done_callback(self._side_done)

    def _side_done(self, task: asyncio.Task[None]) -> None:
        self.side.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.log.error(
                "background write failed", task=task.get_name(), error=repr(task.exception())
            )

    async def drain(self, grace: float, lost: asyncio.Event | None) -> None:
        """Let the bindings in flight finish (up to `grace` seconds), unless the Lease is
        lost: then another instance may already be handing out the same cards, so they are
        cut short at once (their placements are undone, the new leader places the pods)."""
        if self.bindings:
            self.log.info("finishing bindings", in_flight=len(self.bindings))
            pending = set(self.bindings)
            wait = 0.0 if lost is not None and lost.is_set() else grace
            all_done = asyncio.ensure_future(asyncio.wait(pending))
            lost_wait = asyncio.ensure_future(lost.wait()) if lost is not None else None
            waiters: set[asyncio.Future[Any]] = {all_done, *([lost_wait] if lost_wait else [])}
            try:
                await asyncio.wait(waiters, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            finally:
                all_done.cancel()
                if lost_wait is not None:
                    lost_wait.cancel()
            late = {t for t in pending if not t.done()}
            for task in late:
                task.cancel()
            if late:
                # Let the cancelled cycles undo their placements before we report stopped.
                await asyncio.wait(late, timeout=5.0)
                self.log.warning(
                    "bindings cut short",
                    pods=len(late),
                    reason="leader lease lost" if lost is not None and lost.is_set() else "",
                    grace_seconds=grace,
                )
        if self.side:
            await asyncio.wait(set(self.side), timeout=5.0)

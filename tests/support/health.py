"""The database seam of the health service: up, down or wedged, on a clock the test moves."""

from __future__ import annotations

import asyncio


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeDatabase:
    """The database seam: up or down; `wedged`: every call hangs, heartbeats stop, while the
    database itself answers a fresh client (unless `down`)."""

    in_memory = False

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or Clock()
        self.down = False
        self.wedged = False
        self.answered_at = self.topology_checked_at = self.clock()
        self.fresh_pings = 0

    async def ping(self, *, timeout_s: float) -> str | None:
        if self.wedged:
            await asyncio.Event().wait()  # never answers, never times out
        self.answered_at = self.topology_checked_at = self.clock()
        return "ServerSelectionTimeoutError" if self.down else None

    async def fresh_ping(self, *, timeout_s: float) -> bool:
        self.fresh_pings += 1
        return not self.down

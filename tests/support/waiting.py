"""Waiting for something another process makes true, with a bound."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def within(check: Callable[[], Awaitable[bool]], bound_s: float) -> float:
    """Seconds until `check` holds (polled every 20 ms); fails past `bound_s`."""
    started = time.monotonic()
    while not await check():
        assert time.monotonic() - started < bound_s, f"not within {bound_s} s"
        await asyncio.sleep(0.02)
    return time.monotonic() - started

"""Waiting, with a bound, for something another task, thread or process makes true.

Polls instead of sleeping a guessed time: a test waits as long as the thing takes, and fails
with a message (and whatever `describe` adds) once the bound is past. Use an injected clock
instead where the code under test takes one (`clock=`): then nothing waits at all.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx


def _failure(bound_s: float, describe: Callable[[], str] | None) -> str:
    return f"not within {bound_s} s" + (f":\n{describe()}" if describe else "")


async def within(
    check: Callable[[], Awaitable[bool] | bool],
    bound_s: float,
    *,
    every_s: float = 0.02,
    describe: Callable[[], str] | None = None,
) -> float:
    """Seconds until `check` (plain or async) holds; fails past `bound_s`."""
    started = time.monotonic()
    while True:
        outcome = check()
        if await outcome if inspect.isawaitable(outcome) else outcome:
            return time.monotonic() - started
        assert time.monotonic() - started < bound_s, _failure(bound_s, describe)
        await asyncio.sleep(every_s)


def within_blocking(
    check: Callable[[], bool],
    bound_s: float,
    *,
    every_s: float = 0.05,
    describe: Callable[[], str] | None = None,
) -> float:
    """`within` for code with no event loop (a fixture starting a process)."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < bound_s, _failure(bound_s, describe)
        time.sleep(every_s)
    return time.monotonic() - started


async def runs_recorded(
    http: httpx.AsyncClient, headers: dict[str, str], count: int, path: str = "/runs?limit=500"
) -> list[dict[str, Any]]:
    """The run records at `path` once at least `count` are there (records are written off the
    response path, in batches)."""
    items: list[dict[str, Any]] = []

    async def enough() -> bool:
        response = await http.get(path, headers=headers)
        assert response.status_code == 200, response.text
        items[:] = response.json()["items"]
        return len(items) >= count

    await within(enough, 10, describe=lambda: f"{count} run(s) expected, found {len(items)}")
    return items

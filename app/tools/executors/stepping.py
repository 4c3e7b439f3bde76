"""Function tools that are generators: each `Progress` they yield goes to the call's watcher,
the last other value they yield (or a plain generator's `return` value) is the result."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncGenerator, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from app.tools.progress import Progress, ProgressSink

_DONE = object()  # a plain generator's end, carrying no value


async def run_generator(
    made: Any, *, sink: ProgressSink | None, threads: ThreadPoolExecutor, blocking: bool
) -> Any:
    """Drive what a generator function returned to its end and give back its result."""
    if isinstance(made, AsyncGenerator):
        return await _run_async(made, sink)
    assert isinstance(made, Generator)
    return await _run_plain(made, sink, threads, blocking)


async def _run_async(steps: AsyncGenerator[Any, None], sink: ProgressSink | None) -> Any:
    result = None
    try:
        async for item in steps:
            result = await _take(item, sink, result)
    finally:
        await steps.aclose()  # a timeout or cancellation ends the tool's own work too
    return result


async def _run_plain(
    steps: Generator[Any, None, Any],
    sink: ProgressSink | None,
    threads: ThreadPoolExecutor,
    blocking: bool,
) -> Any:
    """Each step in the tool thread pool (unless registered non-blocking), in the caller's
    context, so a slow step never holds the event loop."""
    loop = asyncio.get_running_loop()
    result = None
    try:
        while True:
            if blocking:
                context = contextvars.copy_context()
                item = await loop.run_in_executor(threads, context.run, _step, steps)
            else:
                item = _step(steps)
            if isinstance(item, _Returned):
                return item.value if item.value is not None else result
            result = await _take(item, sink, result)
    finally:
        steps.close()


class _Returned:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _step(steps: Generator[Any, None, Any]) -> Any:
    try:
        return next(steps)
    except StopIteration as stop:
        return _Returned(stop.value)


async def _take(item: Any, sink: ProgressSink | None, result: Any) -> Any:
    """A progress report is passed on (and the loop given a turn); anything else is the
    result so far."""
    if not isinstance(item, Progress):
        return item
    if sink is not None:
        await sink(item)
    await asyncio.sleep(0)  # a generator yielding reports without pause never holds the loop
    return result

"""The function dictionary the chat tests run with."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any

from app.tools.builtin import roll_dice
from app.tools.registry import FunctionRegistry

registry = FunctionRegistry()
registry.register(roll_dice, tool_id="rolldice")
RECEIVED: list[dict[str, Any]] = []
# (start, end) of each sleeping call, as places in the order of all such events (`_EVENTS`), not
# clock readings: whether two calls overlapped is a question of order.
TIMELINE: list[tuple[int, int]] = []
_EVENTS = itertools.count()  # `next` on it is atomic under the GIL: threads share it safely
CANCELLED: list[str] = []  # sleep_async calls that were cancelled
STARTED: list[str] = []  # sleep_async calls that began (a test may act once one is running)


@registry.register(tool_id="profile", context_parameters=["user_id", "api_token"])
def get_profile(user_id: str, api_token: str, field: str = "name") -> dict[str, str]:
    """Read one field of the calling user's profile.

    Args:
        user_id: The user, from the server.
        api_token: The user's token, from the server.
        field: Which field to read.
    """
    RECEIVED.append({"user_id": user_id, "api_token": api_token, "field": field})
    return {"field": field, "value": "Ada"}


@registry.register(tool_id="leaky", context_parameters=["api_token"])
def leak_token(api_token: str) -> str:
    """A careless tool that echoes its secret."""
    return f"debug: called with token {api_token}"


@registry.register(tool_id="chatty", context_parameters=["api_token"])
def log_token(api_token: str) -> str:
    """A careless tool that logs its secret (the service's log formatter must redact it)."""
    logging.getLogger("tests.tools").warning("debug: called with token %s", api_token)
    return "logged"


@registry.register(tool_id="greeter", context_parameters=["locale"])
def greet(name: str, locale: str = "en") -> str:
    """Greet someone; the locale is optional context."""
    return f"{'Bonjour' if locale == 'fr' else 'Hello'} {name}"


@registry.register(tool_id="adder")
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@registry.register(tool_id="sleeper")
async def sleep_async(seconds: float) -> str:
    """Sleep without blocking."""
    started = next(_EVENTS)
    STARTED.append("sleep_async")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        CANCELLED.append("sleep_async")
        raise
    TIMELINE.append((started, next(_EVENTS)))
    return "slept"


@registry.register(tool_id="blocker")
def sleep_blocking(seconds: float) -> str:
    """Sleep in a worker thread (a blocking call)."""
    started = next(_EVENTS)
    time.sleep(seconds)
    TIMELINE.append((started, next(_EVENTS)))
    return "blocked and done"


@registry.register(tool_id="exploder")
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"kaboom: {reason}")


@registry.register(tool_id="big-output")
def big_output(size: int) -> str:
    """Return `size` characters."""
    return "y" * size


@registry.register(tool_id="lister")
def count_items(items: list[str], mode: str = "count") -> int:
    """Count items."""
    return len(items)

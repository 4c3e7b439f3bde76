"""Function tools that report progress (generators yielding `Progress`, then a result)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

from app.tools.builtin import roll_dice
from app.tools.progress import Progress
from app.tools.registry import FunctionRegistry

registry = FunctionRegistry()
registry.register(roll_dice, tool_id="rolldice")


@registry.register(tool_id="countdown")
async def countdown(count: int) -> AsyncIterator[Progress | str]:
    """Count down, reporting each step, then say it is done.

    Args:
        count: How many steps.
    """
    for step in range(count):
        await asyncio.sleep(0)
        yield Progress(f"step {step + 1} of {count}", (step + 1) / count)
    yield f"counted down from {count}"


@registry.register(tool_id="plain-steps")
def plain_steps(count: int) -> Iterator[Any]:
    """A plain generator, run step by step in the tool threads; its `return` is the result.

    Args:
        count: How many steps.
    """
    for step in range(count):
        yield Progress(f"plain {step + 1}")
    return {"steps": count}


@registry.register(tool_id="leaky-steps", context_parameters=["api_token"])
async def leaky_steps(api_token: str) -> AsyncIterator[Any]:
    """Reports progress that carries its hidden value (raw and JSON-escaped), oddly typed."""
    yield Progress(f"using token {api_token}", float("nan"))
    yield Progress(f'{{"token": "{api_token}"}}' + "x" * 5000, 7)  # type: ignore[arg-type]
    yield Progress(None, True)  # type: ignore[arg-type]
    yield "done"


@registry.register(tool_id="flood")
async def flood(count: int) -> AsyncIterator[Any]:
    """Reports progress without pause, `count` times.

    Args:
        count: How many reports.
    """
    for step in range(count):
        yield Progress(str(step))
    yield "flooded"


@registry.register(tool_id="stuck-steps")
async def stuck_steps() -> AsyncIterator[Any]:
    """Reports once, then never finishes."""
    yield Progress("started")
    await asyncio.sleep(3600)
    yield "never"

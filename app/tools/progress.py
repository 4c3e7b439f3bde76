"""Progress from long tools: what a tool reports before its result, for whoever watches.

A function tool reports it by being a generator (plain or async) that yields `Progress(...)`
and then its result; an MCP server by progress notifications. Only the result reaches the
model; progress goes to a streamed chat (`tool_progress`), a streamed invoke and `/mcp` clients
that sent a progress token, scrubbed like any output (`ToolInvoker`).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

PROGRESS_MAX_CHARS = 500  # a progress message past this is cut


@dataclass(frozen=True, slots=True)
class Progress:
    """A step of a long tool: a short message, and how far it is (0 to 1) when it knows."""

    message: str = ""
    fraction: float | None = None

    def bounded(self) -> Progress:
        """The message a string, the fraction a finite number in [0, 1] or None."""
        fraction = self.fraction
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            fraction = None
        elif not math.isfinite(fraction):
            fraction = None
        else:
            fraction = min(max(float(fraction), 0.0), 1.0)
        return Progress(str(self.message), fraction)


# Where a call's progress goes: awaited for each report, so a slow watcher slows the tool.
ProgressSink = Callable[[Progress], Awaitable[None]]

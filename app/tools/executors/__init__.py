"""One executor per kind of tool, behind one small protocol.

An executor runs an already checked call: arguments validated, context merged. It returns a
`ToolOutcome` for the tool's own failures; anything it lets through is turned into an error
outcome by the invoker (`app/tools/invocation.py`), which also enforces the timeout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from app.http.client import OutboundClient
from app.tools.outcome import ToolOutcome
from app.tools.progress import ProgressSink
from app.tools.scrub import Scrubber
from app.tools.typed import TypedTool

ToolT_contra = TypeVar("ToolT_contra", bound=TypedTool, contravariant=True)


class McpCaller(Protocol):
    """The MCP sessions of one chat or invocation (`app/mcp/sessions.py`, McpSessions)."""

    async def call(
        self,
        server_name: str,
        tool: str,
        arguments: dict[str, Any],
        progress: ProgressSink | None = None,
        *,
        read_only: bool = False,
    ) -> ToolOutcome: ...


@dataclass(frozen=True, slots=True)
class CallScope:
    """What one chat or invocation gives each of its tool calls."""

    context: Mapping[str, Any] = field(default_factory=dict)  # the caller's context_arguments
    secrets: Mapping[str, str | None] = field(default_factory=dict)  # None: unset or unreadable
    mcp: McpCaller | None = None
    scrub: Scrubber = field(default_factory=Scrubber)  # hides context values and secrets
    # The tenant's own client for external tools (its allow list); None: the shared one.
    http: OutboundClient | None = None
    # Where this call's progress goes (set per call by the invoker, scrubbed); None: nobody.
    progress: ProgressSink | None = None


class ToolExecutor(Protocol[ToolT_contra]):
    """Runs the calls of one kind of tool (`FunctionExecutor`, `ExternalExecutor`,
    `McpExecutor`); the invoker picks one by `tool.kind`. `run` gets arguments already checked
    and merged with context values, and returns a `ToolOutcome`: an error outcome for the
    tool's own failures (never an exception for those)."""

    def inline(self, tool: ToolT_contra) -> bool:
        """The call runs to its end without ever waiting: no timeout could interrupt it, so
        none is set up (a plain function registered with `blocking=False`)."""
        ...

    async def run(
        self, tool: ToolT_contra, arguments: dict[str, Any], call: CallScope
    ) -> ToolOutcome: ...

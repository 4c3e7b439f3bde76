"""Which tool calls wait for a person's approval in a chat: the one rule every chat applies.

A tool's own `approval` wins; without one, risky tools (marked `destructive_hint`, external
`DELETE`) take the operator's default (RISKY_TOOL_APPROVAL) and the others run at once. Invoke
and `/mcp` never ask: their caller is the one deciding (an MCP client asks its user itself).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.schemas.tools import ApprovalMode
from app.tools.typed import TypedTool


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    risky_default: ApprovalMode = "always"

    def requires(self, tool: TypedTool) -> bool:
        """A chat stops for a person's decision before running a call of `tool`."""
        if tool.approval is not None:
            return tool.approval == "always"
        return tool.risky and self.risky_default == "always"

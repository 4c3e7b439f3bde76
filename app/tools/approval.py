"""Which tool calls wait for a person's approval in a chat, and whose decision it is: the one
rule every chat applies (and `/mcp` reads for its hints).

A tool's own `approval` wins; without one, its category's; without that, risky tools (marked
`destructive_hint`, external `DELETE`) take the operator's default (RISKY_TOOL_APPROVAL) and
the others run at once. `operator` waits like `always`, and the decision is the tenant key's,
not that of a client token whose chat stopped. Invoke and `/mcp` never ask: their caller is
the one deciding (an MCP client asks its user itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.schemas.tools import ApprovalMode
from app.tools.typed import TypedTool

# A tenant's categories' own approval settings, by category name (those that set one).
CategoryApprovals = Mapping[str, ApprovalMode]


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    risky_default: ApprovalMode = "always"

    def mode(self, tool: TypedTool, categories: CategoryApprovals | None = None) -> ApprovalMode:
        """The approval a call of `tool` takes: its own, its category's, or the default."""
        if tool.approval is not None:
            return tool.approval
        if categories and (by_category := categories.get(tool.category)) is not None:
            return by_category
        return self.risky_default if tool.risky else "never"

    def requires(self, tool: TypedTool, categories: CategoryApprovals | None = None) -> bool:
        """A chat stops for a person's decision before running a call of `tool`."""
        return self.mode(tool, categories) != "never"

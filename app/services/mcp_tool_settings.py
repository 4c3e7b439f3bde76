"""The settings an MCP server's tool takes by its `{server}__{tool}` id (category, timeout,
output shaping, approval, presets): written here, applied by the toolbox to the tool its server
lists (`app/mcp/tools.py` `with_settings`), each tenant's its own."""

from __future__ import annotations

from typing import Any

from app.errors import NotFoundError, UnprocessableError, field_error
from app.repositories.database import utc_now
from app.repositories.mcp_tool_settings import McpToolSettingsRepository
from app.schemas.tools import McpToolSettings, McpToolSettingsView
from app.services.toolbox import Toolbox
from app.services.tools import ToolService


class McpToolSettingsService:
    def __init__(
        self,
        *,
        settings: McpToolSettingsRepository,
        toolbox: Toolbox,
        tools: ToolService,
    ) -> None:
        self._settings = settings
        self._toolbox = toolbox
        self._tools = tools

    async def get(self, tool_id: str, *, tenant_id: str) -> McpToolSettingsView:
        found = await self._settings.get(tool_id, tenant_id=tenant_id)
        if found is None:
            raise NotFoundError(f"tool '{tool_id}' has no stored settings")
        return _view(found)

    async def put(
        self, tool_id: str, body: McpToolSettings, *, tenant_id: str
    ) -> McpToolSettingsView:
        """Store a tool's settings whole: 404 when the tenant's servers list no such tool (the
        server is asked: 502/504 when it cannot answer), 422 listing every bad field."""
        tool = await self._toolbox.mcp_tool(tenant_id, tool_id)
        arguments = set(tool.json_parameters.get("properties") or {})
        problems = [
            (
                f"$.presets.{name}",
                f"the tool has no argument '{name}' (its arguments: "
                f"{', '.join(sorted(arguments)) or 'none'})",
            )
            for name in body.presets
            if name not in arguments
        ]
        problems += await self._tools.category_problems(body.category, tenant_id=tenant_id)
        problems += self._tools.bound_problems(body)  # the one rule stored tools follow
        if problems:
            raise UnprocessableError(
                "The tool settings are invalid.",
                errors=[field_error(path, message) for path, message in problems],
            )
        document: dict[str, Any] = {
            **body.model_dump(exclude_none=True, exclude={"type"}),
            "server": tool.server,
            "mcp_tool": tool.mcp_tool,
            "updated_at": utc_now(),
        }
        return _view(await self._settings.put(tool_id, document, tenant_id=tenant_id))

    async def delete(self, tool_id: str, *, tenant_id: str) -> None:
        if not await self._settings.delete(tool_id, tenant_id=tenant_id):
            raise NotFoundError(f"tool '{tool_id}' has no stored settings")


def _view(doc: dict[str, Any]) -> McpToolSettingsView:
    return McpToolSettingsView.model_validate(
        {
            "category": "default",
            "enabled": True,
            "presets": {},
            **{k: v for k, v in doc.items() if k != "tenant_id"},
        }
    )

"""MCP tools as typed tools: what a server lists, turned into what the rest of the house runs.

A server's context-mapped arguments are hidden from the model (they become context slots), its
name is `{server}__{tool}` (`exposed_tool_name`), and its schema is passed through with the
providers that cannot take it as it is named.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import mcp_types

from app.mcp.config import McpServer, exposed_tool_name
from app.tools.providers import provider_problems
from app.tools.rules import compiled_select
from app.tools.typed import ContextSlot, ExternalTool, McpServerTool, TypedTool

_ANNOTATIONS = {
    "read_only_hint": "readOnlyHint",
    "destructive_hint": "destructiveHint",
    "idempotent_hint": "idempotentHint",
    "open_world_hint": "openWorldHint",
}


def mcp_server_tool(server: McpServer, tool: mcp_types.Tool) -> McpServerTool:
    """An MCP tool as a typed tool: context-mapped arguments hidden from the model."""
    schema = dict(tool.input_schema or {})
    properties = dict(schema.get("properties") or {})
    required = list(schema.get("required") or [])
    context = []
    for context_name, argument in server.argument_mappings().items():
        if argument in properties:
            del properties[argument]
            context.append(ContextSlot(context_name, argument, required=argument in required))
            required = [r for r in required if r != argument]
    visible = {**schema, "type": "object", "properties": properties}
    visible.pop("title", None)
    if required:
        visible["required"] = required
    else:
        visible.pop("required", None)
    name = exposed_tool_name(server.name, tool.name)
    return McpServerTool(
        tool_id=name,
        name=name,
        description=tool.description or tool.title or "",
        parameters=None,  # the server checks its own schema
        json_parameters=visible,
        context=tuple(context),
        incompatible_providers=schema_incompatibilities(name, visible),
        title=tool.title or (tool.annotations.title if tool.annotations else None),
        annotations=_annotations(tool.annotations),
        server=server.name,
        mcp_tool=tool.name,
        output_schema=tool.output_schema,
        execution=tool.execution.model_dump(by_alias=True, exclude_none=True)
        if tool.execution
        else None,
    )


def with_settings(tool: McpServerTool, settings: Mapping[str, Any] | None) -> McpServerTool:
    """The tool with the tenant's stored settings for it (`PUT /tools/{server}__{tool}`):
    category, enabled, timeout, output shaping, approval, and presets (arguments set here,
    hidden from the model as context parameters are). A preset for an argument the server no
    longer lists is not sent (the settings' write checked it against the list of then)."""
    if not settings:
        return tool
    properties = dict(tool.json_parameters.get("properties") or {})
    presets = {k: v for k, v in (settings.get("presets") or {}).items() if k in properties}
    visible = {
        **tool.json_parameters,
        "properties": {k: v for k, v in properties.items() if k not in presets},
    }
    required = [r for r in tool.json_parameters.get("required") or [] if r not in presets]
    if required:
        visible["required"] = required
    else:
        visible.pop("required", None)
    output = settings.get("output") or {}
    return dataclasses.replace(
        tool,
        json_parameters=visible,
        context=(
            *tool.context,
            *(
                ContextSlot(name, name, required=False, preset=value)
                for name, value in presets.items()
            ),
        ),
        category=str(settings.get("category") or tool.category),
        enabled=bool(settings.get("enabled", True)),
        timeout_s=settings.get("timeout_s"),
        output_select=compiled_select(output["select"]) if output.get("select") else None,
        output_max_chars=output.get("max_chars"),
        approval=settings.get("approval"),
    )


def _annotations(annotations: mcp_types.ToolAnnotations | None) -> dict[str, bool] | None:
    """The server's hints, kept as they are (snake_case, as stored tools have them)."""
    if annotations is None:
        return None
    hints = {
        key: value
        for key, value in annotations.model_dump(exclude_none=True).items()
        if isinstance(value, bool)
    }
    return hints or None


def served_tool(tool: TypedTool, *, waits: bool = False) -> mcp_types.Tool:
    """Any typed tool as `/mcp` serves it: the model's schema (context parameters stripped), and
    its hints (`served_hints`; `waits`: a chat would stop for a person before calling it)."""
    hints = served_hints(tool, waits=waits)
    annotations = None
    if hints:
        annotations = mcp_types.ToolAnnotations.model_validate(
            {_ANNOTATIONS[k]: v for k, v in hints.items() if k in _ANNOTATIONS}
        )
    output_schema = tool.output_schema if isinstance(tool, McpServerTool) else None
    execution = tool.execution if isinstance(tool, McpServerTool) else None
    return mcp_types.Tool(
        name=tool.name,
        title=tool.title,
        description=tool.description or None,
        input_schema=tool.json_parameters,
        output_schema=output_schema,
        execution=mcp_types.ToolExecution.model_validate(execution) if execution else None,
        annotations=annotations,
    )


_READS = frozenset({"GET", "HEAD", "OPTIONS"})


def served_hints(tool: TypedTool, *, waits: bool) -> dict[str, bool]:
    """The hints an MCP client reads to decide whether to ask its user: the tool's own, else
    what its method says (`GET` reads, `DELETE` destroys), and a tool a chat would stop for (its
    `approval`, its category's, or the risky default) is always `destructiveHint`, never read-only:
    clients ask their user before such a call, as a chat asks a person."""
    hints = dict(tool.annotations or {})
    method = tool.method if isinstance(tool, ExternalTool) else None
    if waits or (method == "DELETE" and "destructive_hint" not in hints):
        hints["destructive_hint"] = True
        hints["read_only_hint"] = False
    elif method in _READS and "read_only_hint" not in hints:
        hints["read_only_hint"] = True
    elif method is not None and "read_only_hint" not in hints:
        hints["read_only_hint"] = False  # it writes: POST, PUT, PATCH
    return hints


def mcp_tool_document(tool: McpServerTool) -> dict[str, Any]:
    """What GET /mcp-servers/{name}/tools shows of a tool."""
    return {
        "tool_id": tool.tool_id,
        "type": "mcp",
        "server": tool.server,
        "mcp_tool": tool.mcp_tool,
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.json_parameters,
        },
        "context_parameters": [
            {"name": c.name, "argument": c.argument, "required": c.required} for c in tool.context
        ],
        "incompatible_providers": tool.incompatible_providers,
    }


def schema_incompatibilities(name: str, schema: dict[str, Any]) -> dict[str, list[str]]:
    """Providers that cannot take a passed-through JSON Schema, even converted, and why (the
    one rule of stored tools, `provider_problems`)."""
    return provider_problems(name, schema)

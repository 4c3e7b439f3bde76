"""What `/mcp` serves a caller: its toolset as MCP tools, and calls to them by name.

The caller's tools come from the toolbox like every other entry point's (`tools/list`: every
tool it may use, the tenant's MCP servers' tools included; a server that cannot be reached is
left out); a call goes through the one invocation path, recorded as a run of kind `mcp`. An MCP
client is an LLM client: with a client token, the token's bound values are the context; with the
tenant key there is none (`app/services/toolbox.py`, the context contract).
"""

from __future__ import annotations

import base64
import time
from collections import OrderedDict
from typing import Any, Literal

import mcp_types
import orjson

from app.errors import AppError
from app.mcp.config import server_of
from app.mcp.tools import served_tool
from app.services.client_tokens import ClientToken
from app.services.invocations import InvocationService, McpToolRun, ToolRunError
from app.services.tool_search import (
    MAX_QUERY_CHARS,
    SEARCH_TOOL_DESCRIPTION,
    SEARCH_TOOL_NAME,
    search_tool_schema,
)
from app.services.toolbox import Selection, Toolbox
from app.tools.approval import ApprovalPolicy
from app.tools.progress import ProgressSink
from app.tools.typed import TypedTool


class InvalidCursorError(ValueError):
    """A `tools/list` cursor this server did not give (the endpoint answers invalid params)."""


class McpGatewayService:
    def __init__(
        self,
        *,
        toolbox: Toolbox,
        invocations: InvocationService,
        page_size: int = 200,
        search: bool = False,
        search_over: int = 64,
        search_results: int = 5,
        approvals: ApprovalPolicy | None = None,
    ) -> None:
        """`search`: MCP_TOOL_SEARCH, what a caller gets whose token does not say."""
        self._toolbox = toolbox
        self._invocations = invocations
        self._approvals = approvals or ApprovalPolicy()
        self._page_size = page_size
        self._search = search
        self._search_over = search_over
        self._search_results = search_results
        # Each typed tool as MCP serves it, made once (typed tools live as long as their
        # definition does, and are shared): a page costs its size in lookups, not in models.
        # (`waits`: a chat would stop for a person before calling it, its hints say so.)
        self._served_tools: OrderedDict[tuple[int, bool], tuple[TypedTool, mcp_types.Tool]] = (
            OrderedDict()
        )

    def _served(self, tool: TypedTool, waits: bool) -> mcp_types.Tool:
        key = (id(tool), waits)
        kept = self._served_tools.get(key)
        if kept is not None and kept[0] is tool:
            self._served_tools.move_to_end(key)
            return kept[1]
        served = served_tool(tool, waits=waits)
        self._served_tools[key] = (tool, served)
        while len(self._served_tools) > MAX_SERVED:
            self._served_tools.popitem(last=False)
        return served

    async def list_tools(
        self, *, tenant_id: str, token: ClientToken | None, cursor: str | None = None
    ) -> tuple[list[mcp_types.Tool], str | None]:
        """One page of the caller's tools as MCP clients see them, ordered by name, and the
        cursor of the next page (None after the last): MCP's pagination, the cursor opaque to
        clients (the last name served, so a tool added or removed between pages never makes
        another one appear twice or be skipped). 422 (`NameClashError`) for a name that two
        of them would share; `InvalidCursorError` for a cursor this server did not give."""
        after = _after(cursor) if cursor is not None else None
        searching = self._searching(token)
        tools, more, categories = await self._toolbox.listing(
            tenant_id,
            token=token,
            after=after,
            limit=self._page_size,
            default_only=self._search_over if searching else None,
        )
        requires = self._approvals.requires
        served = [self._served(tool, requires(tool, categories)) for tool in tools]
        if searching and after is None:  # the search tool heads the first page
            served.insert(0, _SEARCH_TOOL)
        next_cursor = _cursor(tools[-1].name) if more and tools else None
        return served, next_cursor

    async def input_schema(
        self, name: str, *, tenant_id: str, token: ClientToken | None
    ) -> dict[str, Any] | None:
        """The input schema of the tool offered as `name`, as `list_tools` shows it, when it can
        carry `x-mcp-header` annotations (the `Mcp-Param-*` check's only use of it); None when
        the caller has none by that name (the call then answers why) or it cannot carry them.
        Only an MCP server's tool can (its names are `{server}__{tool}`): a stored tool's schema
        takes no such keyword (`app/tools/schema.py`, KEYWORDS), and looking it up opened the
        caller's toolbox a second time per call."""
        if server_of(name) is None:
            return None
        selection = Selection(tool_ids=[name], by_name=True, strict=True)
        try:
            async with await self._toolbox.open(tenant_id, selection, token=token) as toolset:
                return served_tool(toolset.only()).input_schema
        except AppError:
            return None

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        tenant_id: str,
        token: ClientToken | None,
        progress: ProgressSink | None = None,
    ) -> McpToolRun:
        """Run the tool offered as `name` (its progress reports to `progress`); 404 when the
        caller has none by that name. An MCP server's result keeps its own parts
        (`McpToolRun.mcp`: structured content, images, audio, resources, links), scrubbed of the
        run's hidden values."""
        if name == SEARCH_TOOL_NAME and self._searching(token):
            return await self._find(arguments, tenant_id=tenant_id, token=token)
        run = await self._invocations.call_by_name(
            name, arguments, tenant_id=tenant_id, token=token, progress=progress
        )
        assert isinstance(run, McpToolRun)
        return run

    def _searching(self, token: ClientToken | None) -> bool:
        """Whether the caller is offered `search_tools` (its token says, else the setting)."""
        if token is not None and token.search is not None:
            return token.search
        return self._search

    async def _find(
        self, arguments: dict[str, Any], *, tenant_id: str, token: ClientToken | None
    ) -> McpToolRun:
        """`search_tools` on `/mcp`: the caller's best tools for the query, with what a model
        needs to call them (names, descriptions and input schemas), by the same ranking and
        rules as chats."""
        started = time.perf_counter()
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            problem = "'query' must be a non-empty string: the service and the action"
            return _search_run("error", None, problem, started)
        selection = Selection(search_over=0)
        async with await self._toolbox.open(tenant_id, selection, token=token) as toolset:
            if toolset.deferred is None:
                return _search_run("ok", "No tools.", None, started)
            found = await toolset.deferred.search(
                query.strip()[:MAX_QUERY_CHARS], limit=self._search_results, offered=()
            )
        listed = [
            {"name": t.name, "description": t.description, "inputSchema": t.json_parameters}
            for t in found
        ]
        text = orjson.dumps({"tools": listed}).decode() if listed else f"No tool matches {query!r}."
        return _search_run("ok", text, None, started)


CURSOR_PREFIX = "n:"


def _cursor(name: str) -> str:
    return base64.urlsafe_b64encode((CURSOR_PREFIX + name).encode()).decode().rstrip("=")


def _after(cursor: str) -> str:
    """The name a cursor says the last page ended with."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        text = base64.urlsafe_b64decode(padded.encode("ascii")).decode()
    except (ValueError, UnicodeError):
        text = ""
    if len(cursor) > MAX_CURSOR_CHARS or not text.startswith(CURSOR_PREFIX):
        raise InvalidCursorError("The cursor is not one this server gave (tools/list).")
    return text[len(CURSOR_PREFIX) :]


MAX_CURSOR_CHARS = 512
MAX_SERVED = 20_000  # typed tools whose served form is kept


_SEARCH_TOOL = mcp_types.Tool(
    name=SEARCH_TOOL_NAME,
    description=SEARCH_TOOL_DESCRIPTION.replace(
        "are listed and become callable from your next step on",
        "are listed with their input schemas; call them by name",
    ),
    input_schema=search_tool_schema()["function"]["parameters"],
)


def _search_run(
    status: Literal["ok", "error"], content: str | None, problem: str | None, started: float
) -> McpToolRun:
    error = ToolRunError("invalid_arguments", problem) if problem is not None else None
    seconds = time.perf_counter() - started
    return McpToolRun(
        run_id="", tool_id=SEARCH_TOOL_NAME, status=status, content=content, error=error,
        duration_ms=round(seconds * 1000, 3),
    )  # fmt: skip

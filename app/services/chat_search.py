"""Tool search in chats: which tools a chat offers at first, the `search_tools` function that
finds the others, and the provider's tool limit.

A chat whose selection holds more stored tools than TOOL_SEARCH_THRESHOLD (and no `tool_ids`)
is offered the `default` category's tools, the MCP servers it named, and `search_tools`. Each
search ranks the caller's other tools (app/services/tool_search.py), keeps those the rules
allow (enabled, category on, the client token's selection: `DeferredTools`), reveals the best
TOOL_SEARCH_RESULTS of them (their secrets resolved, their hidden values redacted, approval
applied when they are called) and answers with their names and descriptions. No request ever
carries more tools than the provider takes (`tool_limit`); a chat that would is refused with a
422 before the model is called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.chat.apis import tool_limit
from app.chat.loop import Found
from app.errors import UnprocessableError, field_error
from app.schemas.chat import ChatRequest
from app.services.model_providers import ChosenModel
from app.services.tool_search import SEARCH_TOOL_NAME, search_tool_schema
from app.services.toolbox import Selection, Toolset

SHOWN_DESCRIPTION_CHARS = 300


@dataclass(frozen=True)
class SearchSettings:
    over: int | None  # TOOL_SEARCH_THRESHOLD; None: search off
    results: int  # TOOL_SEARCH_RESULTS
    form: str = "function"  # MODEL_TOOL_SEARCH: `native` where the API has a form of its own
    operator_api: str = "chat_completions"  # MODEL_API, for chats on the operator's model


SEARCH_OFF = SearchSettings(over=None, results=5)


NATIVE_APIS = frozenset({"responses", "anthropic_messages"})


class ToolFinder:
    """`search_tools` for one chat: finds and reveals the toolset's deferred tools."""

    name = SEARCH_TOOL_NAME

    def __init__(self, toolset: Toolset, *, results: int, limit: int, native: bool = False) -> None:
        assert toolset.deferred is not None
        self.native = native
        self._toolset = toolset
        self._deferred = toolset.deferred
        self._results = results
        self._limit = limit
        self.schema = search_tool_schema()

    async def find(self, query: str, offered: int) -> Found:
        room = min(self._results, self._limit - offered)
        if room <= 0:
            text = (
                f"No more tools can be added to this chat: it offers {offered}, the most the "
                "model takes in one request. Use the tools already offered."
            )
            return Found([], self._toolset.call, text)
        tools = await self._deferred.search(query, limit=room, offered=self._toolset.by_name)
        call = await self._toolset.reveal(tools)
        if not tools:
            text = (
                f"No tool matches '{query}'. Try other words: the service's name and the "
                "action (for example 'github create issue')."
            )
            return Found([], call, text)
        lines = [f"Found {len(tools)} tools; they can be called from now on:"]
        for tool in tools:
            about = " ".join(tool.description.split())[:SHOWN_DESCRIPTION_CHARS]
            lines.append(f"- {tool.name}: {about}" if about else f"- {tool.name}")
        return Found(tools, call, "\n".join(lines))


async def reveal_called(toolset: Toolset, messages: list[dict[str, Any]]) -> None:
    """A conversation sent back (its next turn, or after `approval_required`) calls tools an
    earlier search revealed: they are offered again at once, through the same rules."""
    if toolset.deferred is None:
        return
    called = {
        call.get("function", {}).get("name")
        for message in messages
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or []
        if isinstance(call, dict)
    }
    found = [
        tool
        for name in sorted(n for n in called if isinstance(n, str) and n not in toolset.by_name)
        if (tool := toolset.deferred.named(name)) is not None
    ]
    if found:
        await toolset.reveal(found)


def chat_selection(request: ChatRequest, settings: SearchSettings) -> Selection:
    """What a chat asks for, searched past TOOL_SEARCH_THRESHOLD."""
    return Selection(
        tool_ids=request.tool_ids,
        tags=request.tags,
        mcp_servers=request.mcp_servers or (),
        search_over=settings.over,
    )


async def chat_finder(
    toolset: Toolset,
    messages: list[dict[str, Any]],
    settings: SearchSettings,
    chosen: ChosenModel | None = None,
) -> ToolFinder | None:
    """The chat's `search_tools`, if its tools are deferred (the tools the conversation called
    after earlier searches offered again at once; in the API's own form when the
    chosen provider's `tool_search`, else MODEL_TOOL_SEARCH, says `native` and the API has one);
    422 when the tools it offers at first would pass the provider's limit (with search off, or
    explicit selections too large)."""
    await reveal_called(toolset, messages)
    api = (chosen.api if chosen is not None else None) or settings.operator_api
    limit = tool_limit(api)
    finder = None
    form = chosen.tool_search if chosen is not None else None
    if toolset.deferred is not None:
        native = (form or settings.form) == "native" and api in NATIVE_APIS
        finder = ToolFinder(toolset, results=settings.results, limit=limit, native=native)
    offered = len(toolset.tools) + (1 if finder is not None else 0)
    if offered > limit:
        how = "select fewer with `tool_ids`, `tags` or `mcp_servers`"
        if settings.over is None:
            how += ", or turn tool search on (TOOL_SEARCH_THRESHOLD)"
        raise UnprocessableError(
            f"This chat would offer {offered} tools; the model API "
            f"'{api or 'chat_completions'}' takes at most {limit} in one request.",
            errors=[field_error("$.tool_ids", f"{offered} tools offered; at most {limit}: {how}")],
        )
    return finder

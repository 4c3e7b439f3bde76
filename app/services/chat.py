"""POST /chat: pick the tenant's tools, run the loop, shape the result."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from app.chat.loop import ChatLoop, ChatRun
from app.chat.model import ModelNotConfiguredError
from app.errors import UnprocessableError, field_error
from app.repositories.tools import ToolRepository
from app.schemas.chat import ChatRequest


class ChatService:
    def __init__(
        self,
        *,
        tools: ToolRepository,
        loop: ChatLoop | None,
        default_model: str,
        max_iterations_cap: int,
    ) -> None:
        self._tools = tools
        self._loop = loop
        self._default_model = default_model
        self._cap = max_iterations_cap

    async def chat(self, request: ChatRequest, *, tenant_id: str) -> dict[str, Any]:
        """Run one conversation to the model's answer (or the iteration cap)."""
        max_iterations = request.max_iterations or self._cap
        if max_iterations > self._cap:
            raise UnprocessableError(
                "max_iterations is above the server's cap.",
                errors=[field_error("$.max_iterations", f"must be at most {self._cap}")],
            )
        if self._loop is None:
            raise ModelNotConfiguredError(
                "No model is configured: set OPENAI_BASE_URL and/or OPENAI_API_KEY."
            )
        tools = await self._tools.enabled(
            tenant_id=tenant_id, tool_ids=request.tool_ids, tags=request.tags
        )
        if request.tool_ids is not None:
            missing = sorted(set(request.tool_ids) - {t["tool_id"] for t in tools})
            if missing:
                raise UnprocessableError(
                    "Some requested tools do not exist, are disabled, or lack the tags.",
                    errors=[field_error("$.tool_ids", f"unavailable: {', '.join(missing)}")],
                )
        result = await self._loop.run(
            ChatRun(
                messages=[m.model_dump(exclude_none=True) for m in request.messages],
                tools=tools,
                context=dict(request.context_arguments),
                model=request.model or self._default_model,
                max_iterations=max_iterations,
                parallel_tool_calls=request.parallel_tool_calls,
            )
        )
        return {**asdict(result), "tool_calls": [asdict(r) for r in result.tool_calls]}

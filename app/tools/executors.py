"""Running one tool call: a server function or an external HTTP endpoint.

Every failure becomes a `ToolOutcome` with an error the model can read; nothing here raises
for a tool's own failure. Timeouts are enforced by the caller around `run`.
"""

from __future__ import annotations

import asyncio
import inspect
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import httpx
import orjson

from app.tools.netguard import OutboundBlockedError
from app.tools.registry import FunctionRegistry

UPSTREAM_ERROR_BODY_CHARS = 300


@dataclass(frozen=True)
class ToolOutcome:
    status: Literal["ok", "error"]
    content: str

    @classmethod
    def error(cls, message: str) -> ToolOutcome:
        return cls("error", message)


def as_text(result: Any) -> str:
    """A function's return value as the text a model reads (JSON for anything but a string)."""
    if isinstance(result, str):
        return result
    return orjson.dumps(result, default=str).decode()


class ToolRunner:
    """Runs tools with the process-wide HTTP client and thread pool built in the lifespan."""

    def __init__(
        self,
        *,
        registry: FunctionRegistry,
        http: httpx.AsyncClient,
        threads: ThreadPoolExecutor,
        response_max_bytes: int,
    ) -> None:
        self._registry = registry
        self._http = http
        self._threads = threads
        self._response_max_bytes = response_max_bytes

    def optional_context(self, tool: dict[str, Any]) -> frozenset[str]:
        """Context parameters that may be absent: those the function gives a default."""
        entry = self._registry.get(tool["function"]["name"]) if tool["type"] == "function" else None
        return frozenset() if entry is None else entry.defaulted_parameters

    async def run(self, tool: dict[str, Any], arguments: dict[str, Any]) -> ToolOutcome:
        if tool["type"] == "function":
            return await self._run_function(tool["function"]["name"], arguments)
        return await self._run_external(tool["function"], arguments)

    async def _run_function(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        entry = self._registry.get(name)
        if entry is None:
            return ToolOutcome.error(f"the server no longer has a function called '{name}'")
        try:
            if inspect.iscoroutinefunction(entry.func):
                result = await entry.func(**arguments)
            else:
                # A plain function runs in a worker thread so it never blocks the event loop.
                loop = asyncio.get_running_loop()
                result = await loop.run_in_executor(self._threads, partial(entry.func, **arguments))
        except Exception as exc:
            return ToolOutcome.error(f"{type(exc).__name__}: {exc}")
        return ToolOutcome("ok", as_text(result))

    async def _run_external(
        self, function: dict[str, Any], arguments: dict[str, Any]
    ) -> ToolOutcome:
        method = function["method"]
        as_query = method in ("GET", "DELETE")  # arrays become repeated keys
        try:
            request = self._http.build_request(
                method,
                function["url"],
                params=arguments if as_query else None,
                json=None if as_query else arguments,
            )
            response = await self._http.send(request, stream=True, follow_redirects=False)
            try:
                text, truncated = await self._read_capped(response)
            finally:
                await response.aclose()
        except OutboundBlockedError as exc:
            return ToolOutcome.error(f"blocked: {exc}")
        except httpx.TimeoutException:
            return ToolOutcome.error("the tool's endpoint did not answer in time")
        except httpx.HTTPError as exc:
            return ToolOutcome.error(f"cannot reach the tool's endpoint: {type(exc).__name__}")
        if truncated:
            text += f"\n[truncated: the response exceeded {self._response_max_bytes} bytes]"
        if response.status_code >= 300:
            return ToolOutcome.error(
                f"the tool's endpoint answered HTTP {response.status_code}: "
                f"{text[:UPSTREAM_ERROR_BODY_CHARS]}"
            )
        return ToolOutcome("ok", text)

    async def _read_capped(self, response: httpx.Response) -> tuple[str, bool]:
        """Read at most the cap of decoded bytes: a gzip bomb stops at the cap, not in memory."""
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size > self._response_max_bytes:
                data = b"".join(chunks)[: self._response_max_bytes]
                return data.decode(response.encoding or "utf-8", errors="replace"), True
        return b"".join(chunks).decode(response.encoding or "utf-8", errors="replace"), False

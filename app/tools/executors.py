"""Running one tool call: a server function or an external HTTP endpoint.

Every failure becomes a `ToolOutcome` with an error the model can read; nothing here raises
for a tool's own failure. Timeouts are enforced by the caller around `run`.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import httpx
import orjson

from app.tools.definitions import SECRET_REFERENCE
from app.tools.netguard import OutboundBlockedError
from app.tools.registry import FunctionRegistry

UPSTREAM_ERROR_BODY_CHARS = 300


ErrorKind = Literal[
    "unknown_tool",
    "invalid_arguments",
    "missing_context",
    "timeout",
    "exception",
    "blocked",
    "unreachable",
    "upstream_status",
    "tool_error",
]


@dataclass(frozen=True)
class ToolOutcome:
    status: Literal["ok", "error"]
    content: str
    kind: ErrorKind | None = None  # why an error happened, for metrics

    @classmethod
    def error(cls, message: str, kind: ErrorKind) -> ToolOutcome:
        return cls("error", message, kind)


def as_text(result: Any) -> str:
    """A function's return value as the text a model reads (JSON for anything but a string)."""
    if isinstance(result, str):
        return result
    return orjson.dumps(result, default=str).decode()


def unset_secret(name: str) -> str:
    return f"the secret '{name}' is not set for this tenant (PUT /secrets/{name})"


def render_headers(
    templates: dict[str, str] | None, secrets: dict[str, str | None]
) -> tuple[dict[str, str] | None, list[str]]:
    """An external tool's headers with `{secret:NAME}` replaced; problems name secrets only."""
    if not templates:
        return None, []
    problems: list[str] = []

    def value_of(match: re.Match[str]) -> str:
        name = match.group(1)
        value = secrets.get(name)
        if value is None:
            problems.append(unset_secret(name))
            return ""
        if any(ch in value for ch in "\r\n\x00"):
            problems.append(f"the secret '{name}' contains a line break and cannot go in a header")
            return ""
        return value

    rendered = {name: SECRET_REFERENCE.sub(value_of, value) for name, value in templates.items()}
    return rendered, problems


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

    async def run(
        self,
        tool: dict[str, Any],
        arguments: dict[str, Any],
        *,
        secrets: dict[str, str | None] | None = None,
    ) -> ToolOutcome:
        if tool["type"] == "function":
            return await self._run_function(tool["function"]["name"], arguments)
        headers, problems = render_headers(tool["function"].get("headers"), secrets or {})
        if problems:
            return ToolOutcome.error("; ".join(problems), "missing_context")
        return await self._run_external(tool["function"], arguments, headers)

    async def _run_function(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        entry = self._registry.get(name)
        if entry is None:
            return ToolOutcome.error(
                f"the server no longer has a function called '{name}'", "unknown_tool"
            )
        try:
            if inspect.iscoroutinefunction(entry.func):
                result = await entry.func(**arguments)
            else:
                # A plain function runs in a worker thread so it never blocks the event loop.
                loop = asyncio.get_running_loop()
                # In the caller's context: its log lines keep the request id, tenant and the
                # chat's hidden values (run_in_executor alone would drop them).
                call = partial(contextvars.copy_context().run, entry.func, **arguments)
                result = await loop.run_in_executor(self._threads, call)
        except Exception as exc:
            return ToolOutcome.error(f"{type(exc).__name__}: {exc}", "exception")
        return ToolOutcome("ok", as_text(result))

    async def _run_external(
        self, function: dict[str, Any], arguments: dict[str, Any], headers: dict[str, str] | None
    ) -> ToolOutcome:
        method = function["method"]
        as_query = method in ("GET", "DELETE")  # arrays become repeated keys
        try:
            request = self._http.build_request(
                method,
                function["url"],
                params=arguments if as_query else None,
                json=None if as_query else arguments,
                headers=headers,
            )
            response = await self._http.send(request, stream=True, follow_redirects=False)
            try:
                text, truncated = await self._read_capped(response)
            finally:
                await response.aclose()
        except OutboundBlockedError as exc:
            return ToolOutcome.error(f"blocked: {exc}", "blocked")
        except httpx.TimeoutException:
            return ToolOutcome.error("the tool's endpoint did not answer in time", "timeout")
        except httpx.HTTPError as exc:
            return ToolOutcome.error(
                f"cannot reach the tool's endpoint: {type(exc).__name__}", "unreachable"
            )
        if truncated:
            text += f"\n[truncated: the response exceeded {self._response_max_bytes} bytes]"
        if response.status_code >= 300:
            return ToolOutcome.error(
                f"the tool's endpoint answered HTTP {response.status_code}: "
                f"{text[:UPSTREAM_ERROR_BODY_CHARS]}",
                "upstream_status",
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

"""External tools: an HTTP endpoint called through the guarded, shared httpx client.

The request (URL with its query, headers, body) is built by `request.build_request`; here it is
sent. Redirects are never followed; the response is read up to a cap.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping
from typing import Any

import httpx

from app.tools.executors import CallScope
from app.tools.executors.request import build_request
from app.tools.netguard import OutboundBlockedError
from app.tools.outcome import ToolOutcome, unset_secret
from app.tools.rules import SECRET_REFERENCE
from app.tools.typed import ExternalTool

UPSTREAM_ERROR_BODY_CHARS = 300


def render_headers(
    templates: dict[str, str] | None, secrets: Mapping[str, str | None]
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


class ExternalExecutor:
    """Calls an external tool's endpoint: header templates filled from secrets, arguments
    placed in path, query, headers or body, sent through the tenant's guarded client (else the
    shared one) without following redirects; the body is read up to `response_max_bytes` and
    a status of 300 or more (a redirect too) becomes an error outcome with the start of the body."""

    def __init__(self, *, http: httpx.AsyncClient, response_max_bytes: int) -> None:
        self._http = http
        self._response_max_bytes = response_max_bytes

    def inline(self, tool: ExternalTool) -> bool:
        return False

    async def run(
        self, tool: ExternalTool, arguments: dict[str, Any], call: CallScope
    ) -> ToolOutcome:
        headers, problems = render_headers(tool.headers, call.secrets)
        if problems:
            return ToolOutcome.error("; ".join(problems), "missing_context")
        built = build_request(tool, arguments)
        if built.problems:
            return ToolOutcome.error("; ".join(built.problems), "invalid_arguments")
        http = call.http or self._http
        try:
            request = http.build_request(
                tool.method,
                built.url,
                content=built.body,
                headers={**built.headers, **(headers or {})},
            )
            response = await http.send(request, stream=True, follow_redirects=False)
            try:
                text, truncated = await self._read_capped(response)
            finally:
                await response.aclose()
        except OutboundBlockedError as exc:
            return ToolOutcome.error(f"blocked: {exc}", "blocked")
        except httpx.TimeoutException:
            return ToolOutcome.error("the tool's endpoint did not answer in time", "timeout")
        except httpx.InvalidURL:  # a stored URL this client cannot use; never repeated
            return ToolOutcome.error("the tool's URL is not valid", "unreachable")
        except httpx.HTTPError as exc:
            return ToolOutcome.error(
                f"cannot reach the tool's endpoint: {type(exc).__name__}", "unreachable"
            )
        if truncated:
            text += f"\n[truncated: the response exceeded {self._response_max_bytes} bytes]"
        if response.status_code >= 300:
            limit = UPSTREAM_ERROR_BODY_CHARS  # scrubbed before the cut, as in the invoker
            shown = call.scrub.head(text, limit) if call.scrub else text
            return ToolOutcome.error(
                f"the tool's endpoint answered HTTP {response.status_code}: {shown[:limit]}",
                "upstream_status",
            )
        return ToolOutcome("ok", text)

    async def _read_capped(self, response: httpx.Response) -> tuple[str, bool]:
        """Read at most the cap of decoded bytes: a gzip bomb stops at the cap, in memory and in
        CPU. gzip and deflate are inflated here a bounded step at a time (httpx would inflate a
        whole network chunk at once, tens of MB of a bomb's, on the event loop)."""
        cap = self._response_max_bytes
        inflater = _Inflater.for_encoding(response.headers.get("content-encoding", ""))
        chunks: list[bytes] = []
        size = 0
        stream = response.aiter_raw() if inflater is not None else response.aiter_bytes()
        async for raw in stream:
            chunk = inflater.inflate(raw, cap + 1 - size) if inflater is not None else raw
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                data = b"".join(chunks)[:cap]
                return data.decode(response.encoding or "utf-8", errors="replace"), True
        return b"".join(chunks).decode(response.encoding or "utf-8", errors="replace"), False


class _Inflater:
    """gzip or deflate, inflated at most `limit` bytes per call (zlib's `max_length`)."""

    def __init__(self, wbits: int, *, raw_fallback: bool) -> None:
        self._inflate = zlib.decompressobj(wbits)
        self._raw_fallback = raw_fallback  # `deflate` is sent with or without zlib's header
        self._started = False

    @classmethod
    def for_encoding(cls, encoding: str) -> _Inflater | None:
        encoding = encoding.strip().lower()
        if encoding in ("gzip", "x-gzip"):
            return cls(16 + zlib.MAX_WBITS, raw_fallback=False)
        if encoding == "deflate":
            return cls(zlib.MAX_WBITS, raw_fallback=True)
        return None  # identity, or what httpx decodes itself (br, zstd, several codings)

    def inflate(self, data: bytes, limit: int) -> bytes:
        try:
            out = self._inflate.decompress(data, max(limit, 1))
        except zlib.error as exc:
            if not self._raw_fallback or self._started:
                raise httpx.DecodingError(f"the response's content is not valid: {exc}") from None
            self._inflate = zlib.decompressobj(-zlib.MAX_WBITS)
            self._raw_fallback = False
            out = self._inflate.decompress(data, max(limit, 1))
        self._started = True
        return out

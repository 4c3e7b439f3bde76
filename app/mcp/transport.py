"""MCP servers over HTTP through the service's own HTTP client: an httpx2 transport (httpx2 is
the MCP SDK's HTTP library; a client's transport is its public extension point) that sends each
request through an `OutboundClient` (`app/http/client.py` on `app/http/wire.py`). So an
MCP server's requests take the same connect guard, header rule, llhttp parser, pools and
deadlines as an external tool's, and no second HTTP stack is configured or guarded here.

httpx2 keeps what is its own: the request's headers and body as the SDK builds them, redirects
(the SDK's same-origin rule), and the decoding of content codings; this transport hands it the
answer's body as it arrives.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx2

from app.http.client import (
    OutboundClient,
    OutboundError,
    OutboundResponse,
    OutboundTimeoutError,
    OutboundUnreachableError,
    outbound_error,
)
from app.http.netguard import OutboundBlockedError
from app.http.wire import HeaderError, WireError


class WireTransport(httpx2.AsyncBaseTransport):
    """Sends httpx2's requests through `client`, which it owns (closed with the transport)."""

    def __init__(self, client: OutboundClient) -> None:
        self._client = client

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        headers: dict[str, str] = {}
        for name, value in request.headers.multi_items():
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        read_s = request.extensions.get("timeout", {}).get("read")
        stack = contextlib.AsyncExitStack()
        try:
            response = await stack.enter_async_context(
                self._client.request(
                    request.method,
                    str(request.url),
                    body=body if body or request.method in ("POST", "PUT", "PATCH") else None,
                    headers=headers,
                    timeout_s=read_s,
                    # A request that met a kept-alive connection the server had closed before
                    # any answer goes again on a fresh one, as browsers do: a server closes an
                    # idle connection when its keep-alive passes (uvicorn: 5 s), and the SDK
                    # would take the failure for the end of the session.
                    resend_dropped=True,
                )
            )
        except BaseException as exc:
            await stack.aclose()
            mapped = _httpx_error(exc, request)
            if mapped is exc:
                raise
            raise mapped from exc
        return httpx2.Response(
            response.status,
            headers=list(response.headers.items()),
            stream=_Body(response, stack, request),
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def aclose(self) -> None:
        await self._client.aclose()


class _Body(httpx2.AsyncByteStream):
    """The answer's body as it arrives; closing it ends the exchange (a connection whose
    answer was read to its end goes back to the pool)."""

    def __init__(
        self, response: OutboundResponse, stack: contextlib.AsyncExitStack, request: httpx2.Request
    ) -> None:
        self._response = response
        self._stack = stack
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for piece in self._response.pieces():
                yield piece
        except (TimeoutError, WireError, OSError) as exc:
            raise _httpx_error(outbound_error(exc), self._request) from exc

    async def aclose(self) -> None:
        await self._stack.aclose()


def _httpx_error(exc: BaseException, request: httpx2.Request) -> BaseException:
    """The httpx2 exception the SDK expects for a failure of the service's client; the cause
    stays attached (`app.mcp.client.failure_reason` finds a blocked destination by it)."""
    if isinstance(exc, OutboundBlockedError):
        return httpx2.ConnectError(f"blocked: {exc}", request=request)
    if isinstance(exc, HeaderError):
        return httpx2.LocalProtocolError(str(exc), request=request)
    if isinstance(exc, OutboundTimeoutError):
        return httpx2.ReadTimeout(str(exc), request=request)
    if isinstance(exc, OutboundUnreachableError):
        kind = httpx2.ConnectError if "Malformed" not in exc.reason else httpx2.RemoteProtocolError
        return kind(exc.reason, request=request)
    if isinstance(exc, OutboundError):
        return httpx2.ConnectError(str(exc), request=request)
    return exc

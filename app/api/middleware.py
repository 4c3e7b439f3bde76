"""ASGI middleware that must see the raw request."""

from __future__ import annotations

import asyncio
import logging
import os
import time

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.console import CONSOLE_ASSETS_URL
from app.api.docs import ASSETS_URL
from app.api.problems import problem_response
from app.logs import request_context
from app.metrics import Metrics

access_logger = logging.getLogger("app.access")


class BodySizeLimitMiddleware:
    """413 when a body exceeds `max_bytes`: at once if declared, else as soon as it streams past.
    408 (and the connection closed) when the body has not all arrived within `timeout_s` of the
    request: a client that sends less than its Content-Length, or never ends a chunked body,
    must not hold a connection forever (uvicorn has no body timeout of its own)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, timeout_s: float = 15.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    def _detail(self) -> str:
        return f"The request body is larger than the limit of {self.max_bytes} bytes."

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await problem_response(413, self._detail())(scope, receive, send)
            return
        received = 0
        deadline = time.monotonic() + self.timeout_s
        body_done = False

        async def limited_receive() -> Message:
            nonlocal received, body_done
            if body_done:  # afterwards receive() only waits for a disconnect: no deadline
                return await receive()
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    message = await receive()
            except TimeoutError:
                raise HTTPException(
                    408,
                    f"The request body did not arrive within {self.timeout_s:g} s.",
                    headers={"Connection": "close"},
                ) from None
            if message["type"] == "http.request":
                body_done = not message.get("more_body", False)
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # FastAPI re-raises HTTPException from body parsing; the problem handler
                    # answers it like any other error.
                    raise HTTPException(413, self._detail())
            return message

        await self.app(scope, limited_receive, send)


REQUEST_ID_HEADER = b"x-request-id"
_MAX_REQUEST_ID = 128
_ID_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")


# Served without a route template: FastAPI's own schema route, `/mcp` (an ASGI app), and the
# docs assets' mount.
_FIXED_PATHS = frozenset({"/openapi.json", "/mcp"})


class RequestContextMiddleware:
    """Outermost: gives every response `X-Request-ID` (the caller's, when it is a sane token,
    else a new one), sets the log context (request id; authentication adds the tenant), and
    when the response ends writes one access-log line and counts it in the metrics."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics, access_log: bool = True) -> None:
        self.app = app
        self.metrics = metrics
        self.access_log = access_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        given = dict(scope["headers"]).get(REQUEST_ID_HEADER, b"")
        if not (0 < len(given) <= _MAX_REQUEST_ID and _ID_CHARS.issuperset(given)):
            # 32 random hex digits, as uuid4().hex without its fixed bits (a quarter of the
            # cost: `uuid.UUID` is pure Python and every request without an id pays it).
            given = os.urandom(16).hex().encode()
        request_id = given.decode()
        scope.setdefault("state", {})["request_id"] = request_id
        context = {"request_id": request_id}
        token = request_context.set(context)
        status = 500  # if the app fails before it answers, the server answers 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [h for h in message.get("headers", []) if h[0] != REQUEST_ID_HEADER]
                message["headers"] = [*headers, (REQUEST_ID_HEADER, given)]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            self._done(scope, status, time.perf_counter() - started)
            request_context.reset(token)

    def _done(self, scope: Scope, status: int, duration_s: float) -> None:
        # The template, never the path: paths hold ids, and labels must stay few. Anything
        # unrouted is "unmatched".
        route = scope.get("route")
        template = getattr(route, "path_format", None)
        if template is None:
            path = scope["path"]
            if path in _FIXED_PATHS:
                template = path
            elif path.startswith(f"{ASSETS_URL}/"):
                template = ASSETS_URL
            elif path.startswith(f"{CONSOLE_ASSETS_URL}/"):
                template = CONSOLE_ASSETS_URL
            else:
                template = "unmatched"
        method = scope["method"]
        self.metrics.request_done(method, template, status, duration_s)
        # `/mcp`: the JSON-RPC method it carried (a bounded label, set by the endpoint).
        rpc = scope.get("state", {}).get("mcp_method") if template == "/mcp" else None
        if rpc is not None:
            self.metrics.mcp_request_done(rpc, status)
        if self.access_log and access_logger.isEnabledFor(logging.INFO):
            extra = {
                "method": method,
                "route": template,
                "status": status,
                "duration_ms": round(duration_s * 1000, 3),
            }
            if rpc is not None:
                extra["mcp_method"] = rpc
            access_logger.info("%s %s %d", method, template, status, extra=extra)

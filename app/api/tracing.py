"""The HTTP request's span (SERVER), continuing the caller's W3C trace context when it sends one.

Installed only while tracing is on (`create_app`): off, requests pass no layer of it at all.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.observe.telemetry import request_context, started

FIXED_ROUTES = frozenset({"/mcp", "/openapi.json"})  # served without a route template


class TracingMiddleware:
    """Outermost: the request's span is current while every other layer runs (so the access log
    line carries its ids), named `{method} {route template}` once the route is known. Neither
    the query string nor any header is recorded (either may carry a credential)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        attributes = {
            "http.request.method": method,
            "url.path": scope["path"],
            "url.scheme": scope.get("scheme", "http"),
            "network.protocol.version": scope.get("http_version", "1.1"),
        }
        parent = request_context(scope["headers"])
        status = 500  # if the app fails before it answers, the server answers 500

        async def send_traced(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        with started(method, kind=SpanKind.SERVER, attributes=attributes, parent=parent) as span:
            try:
                await self.app(scope, receive, send_traced)
            finally:
                if span is not None and span.is_recording():
                    _answered(span, scope, method, status)


def _answered(span: Span, scope: Scope, method: str, status: int) -> None:
    """What is known once the app answered: the route, the status, the request's id."""
    found: dict[str, Any] = {"http.response.status_code": status}
    route = getattr(scope.get("route"), "path_format", None)
    if route is None and scope["path"] in FIXED_ROUTES:
        route = scope["path"]
    if route is not None:
        span.update_name(f"{method} {route}")
        found["http.route"] = route
    request_id = scope.get("state", {}).get("request_id")
    if request_id is not None:
        found["toolgate.request_id"] = request_id
    if status >= 500:
        found["error.type"] = str(status)
        span.set_status(Status(StatusCode.ERROR))
    span.set_attributes(found)

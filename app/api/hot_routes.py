"""`POST /tools/{tool_id}/invoke`, `POST /chat` and `/mcp`: ordinary Starlette routes placed
first in the app's routing table (`hot_routes`), ahead of FastAPI's routes of the same paths.

Why: the cost of FastAPI's route machinery (docs/performance.md, "Why the code is shaped as it
is"). These routes take only the plain case: a POST with a JSON body (and, for invoke, a
well-formed tool id and no stream asked for). Anything else (a malformed id, another content
type, another method) does not match them and reaches the FastAPI route of the same path, which
stays the documented one.

The plain case runs the same steps the FastAPI route runs, in the same order, through the same
functions (`authenticate`, the body's model, the service); it is inside every middleware and
Starlette's exception layer, so its errors reach the app's exception handlers like any route's.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import orjson
from fastapi.exceptions import RequestValidationError
from starlette.datastructures import URLPath
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, NoMatchFound, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.leaving import CLIENT_CLOSED_REQUEST, unless_client_leaves
from app.api.routing import json_body, parsed_body, validated_body, whole_body
from app.api.sse import event_stream
from app.deps import TenantContext, authenticate, presented_bearer
from app.schemas.chat import ChatRequest
from app.schemas.invocations import InvokeRequest

if TYPE_CHECKING:
    from app.container import Services

INVOKE_PATH = "/tools/{tool_id}/invoke"
CHAT_PATH = "/chat"
# The tool id as `NAME_PATTERN` has it, matched whole (a `$` would also take a trailing newline).
_TOOL_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_JSON_HEADERS = [(b"content-type", b"application/json")]


def wants_stream(accept: str) -> bool:
    """The caller asks for progress events (`text/event-stream`) rather than one JSON answer."""
    return "text/event-stream" in accept


async def invoke_json(tenant: TenantContext, tool_id: str, request: Request) -> bytes:
    """The plain invoke, both routes: the body checked, the tool run, the `ToolRun` as JSON."""
    body = await parsed_body(request, InvokeRequest)
    result = await tenant.services.invocations.invoke(
        tool_id, body.arguments, body.context_arguments, tenant_id=tenant.id, token=tenant.token
    )
    return orjson.dumps(result)  # a dataclass


async def send_json(send: Send, payload: bytes, status: int = 200) -> None:
    """A JSON answer, as Starlette's `Response(payload, media_type="application/json")` sends
    it, without building one."""
    headers = [*_JSON_HEADERS, (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


class HotRoute(Route):
    """A route placed ahead of FastAPI's route of the same path, matching only the requests
    `plain` accepts (a POST, for those with a body); it has no name of its own: `url_for`
    finds the FastAPI route."""

    def __init__(self, path: str, app: ASGIApp, *, methods: list[str] | None = None) -> None:
        super().__init__(path, app, methods=methods, include_in_schema=False)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is not Match.FULL or not self.plain(scope, child["path_params"]):
            return Match.NONE, {}
        child["route"] = self  # the access log's and metrics' route label (`path_format`)
        return Match.FULL, child

    def plain(self, scope: Scope, path_params: dict[str, Any]) -> bool:
        return True

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        raise NoMatchFound(name, path_params)


class _Endpoint:
    """An ASGI function as a route's app (Starlette serves a plain function as `request ->
    response`, through its request and response wrappers)."""

    __slots__ = ("_handle",)

    def __init__(self, handle: ASGIApp) -> None:
        self._handle = handle

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        return self._handle(scope, receive, send)


class InvokeRoute(HotRoute):
    """The plain `POST /tools/{tool_id}/invoke` (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(INVOKE_PATH, _Endpoint(_invoke), methods=["POST"])

    def plain(self, scope: Scope, path_params: dict[str, Any]) -> bool:
        if not _TOOL_ID.fullmatch(path_params["tool_id"]):
            return False
        for name, value in scope["headers"]:
            if name == b"accept":  # the first one, as `request.headers.get` reads it
                return not wants_stream(value.decode("latin-1"))
        return True


async def _invoke(scope: Scope, receive: Receive, send: Send) -> None:
    services: Services = scope["app"].state.services
    request = Request(scope, receive)
    tenant = await authenticate(
        services, presented_bearer(request), client_tokens=True, request=request
    )
    payload = await invoke_json(tenant, scope["path_params"]["tool_id"], request)
    await send_json(send, payload)


async def chat_response(tenant: TenantContext, body: ChatRequest, request: Request) -> Response:
    """`POST /chat`, both routes: the chat started (every 4xx before the answer), then answered
    whole or streamed; a whole chat whose client leaves stops (`app/api/leaving.py`)."""
    services = tenant.services
    started = await services.chat.start(body, tenant_id=tenant.id, token=tenant.token)
    if body.stream or wants_stream(request.headers.get("accept", "")):
        keepalive_s = services.settings.chat_stream_keepalive_s
        return event_stream(started.events(keepalive_s=keepalive_s), run_id=started.run_id)
    answer = await unless_client_leaves(request.scope, request.receive, started.result())
    if answer is None:  # nobody is there to read it
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    # Validated when it was built: serialized once here, with no second validation.
    return Response(
        answer.model_dump_json(),
        media_type="application/json",
        headers={"X-Run-ID": started.run_id},
    )


class ChatRoute(HotRoute):
    """`POST /chat` with a JSON body (see the module docstring). FastAPI's order is kept: a body
    that is not JSON is a 400 before the credential is checked, a missing or mis-shaped one a
    422 after."""

    def __init__(self) -> None:
        super().__init__(CHAT_PATH, _Endpoint(_chat), methods=["POST"])

    def plain(self, scope: Scope, path_params: dict[str, Any]) -> bool:
        return _json_content(scope)


async def _chat(scope: Scope, receive: Receive, send: Send) -> None:
    services: Services = scope["app"].state.services
    request = Request(scope, receive)
    raw = await whole_body(receive)
    data = json_body(raw) if raw else None
    tenant = await authenticate(
        services, presented_bearer(request), client_tokens=True, request=request
    )
    if not raw:
        missing = {"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}
        raise RequestValidationError([missing])
    body = validated_body(data, ChatRequest)
    response = await chat_response(tenant, body, request)
    await response(scope, receive, send)


def hot_routes(mcp: ASGIApp) -> list[HotRoute]:
    """The routes the app places first in its routing table: invoke, chat and `/mcp` (every
    method: the endpoint checks the credential before it says anything about the method)."""
    return [InvokeRoute(), ChatRoute(), HotRoute("/mcp", mcp)]


def _json_content(scope: Scope) -> bool:
    """The request's first Content-Type is JSON (FastAPI parses the body of no other as JSON)."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            media: bytes = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json"
    return False

"""`POST /tools/{tool_id}/invoke`, `POST /chat` and `/mcp` answered ahead of FastAPI's routing.

FastAPI's route machinery (the included router's match, dependency solving, its request and
response wrappers) cost about a third of an invoke's CPU, and the exception and exit-stack
layers and the router in front of any route another 20-30 us. `HotLane` is the innermost of
the app's middleware: it holds `InvokeRoute`, `ChatRoute` and the `/mcp` endpoint, and answers
what they match with the app's exception handlers as Starlette's exception layer applies them;
anything else goes on to that layer and the router. The hot routes take only the plain case: a
POST with a JSON body (and, for invoke, a well-formed tool id and no stream asked for). Anything
else (a malformed id, another content type, another method) does not match them and reaches
the FastAPI route, which stays the documented one.

The plain case runs the same steps the FastAPI route runs, in the same order, through the same
functions (`authenticate`, the body's model, the service); it is still inside every middleware
(request id, access log, metrics, body limits, CORS, the server-error layer), and its errors
reach the app's exception handlers like any route's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson
from fastapi.exceptions import RequestValidationError
from starlette._exception_handler import wrap_app_handling_exceptions
from starlette._utils import get_route_path
from starlette.datastructures import URLPath
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.types import ASGIApp, ExceptionHandler, Receive, Scope, Send

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
_INVOKE = re.compile(r"/tools/([a-zA-Z0-9_-]{1,64})/invoke")
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


class HotLane:
    """The innermost middleware: a request one of `routes` matches is handled here, its errors
    through the app's exception handlers (`handlers`, the app's own dict, read when the stack
    is built) as Starlette's `ExceptionMiddleware` would; Exception itself (a 500) is left to
    the server-error layer outside, as it is for any route. Anything else goes on to `app`."""

    def __init__(
        self, app: ASGIApp, *, routes: tuple[BaseRoute, ...], handlers: Mapping[Any, Any]
    ) -> None:
        self.app = app
        self.routes = routes
        by_class: dict[Any, ExceptionHandler] = {}
        by_status: dict[int, ExceptionHandler] = {}
        for key, handler in handlers.items():  # as ExceptionMiddleware sorts them
            if key in (500, Exception):
                continue
            if isinstance(key, int):
                by_status[key] = handler
            else:
                by_class[key] = handler
        self._handlers = (by_class, by_status)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for route in self.routes:
                match, child = route.matches(scope)
                if match is Match.FULL:
                    scope.update(child)
                    scope["starlette.exception_handlers"] = self._handlers
                    handled = wrap_app_handling_exceptions(route.handle, Request(scope, receive))
                    await handled(scope, receive, send)
                    return
        await self.app(scope, receive, send)


class _HotRoute(BaseRoute):
    """A hot route has no name of its own: `url_for` finds the FastAPI route of its path."""

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        raise NoMatchFound(name, path_params)


class InvokeRoute(_HotRoute):
    """The plain `POST /tools/{tool_id}/invoke` (see the module docstring)."""

    path_format = INVOKE_PATH  # the metrics' and access log's route label

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http" or scope["method"] != "POST":
            return Match.NONE, {}
        found = _INVOKE.fullmatch(get_route_path(scope))
        if found is None:
            return Match.NONE, {}
        for name, value in scope["headers"]:
            if name == b"accept":  # the first one, as `request.headers.get` reads it
                if wants_stream(value.decode("latin-1")):
                    return Match.NONE, {}
                break
        return Match.FULL, {"path_params": {"tool_id": found[1]}, "route": self}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
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


class ChatRoute(_HotRoute):
    """`POST /chat` with a JSON body (see the module docstring). FastAPI's order is kept: a body
    that is not JSON is a 400 before the credential is checked, a missing or mis-shaped one a
    422 after."""

    path_format = CHAT_PATH

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http" or scope["method"] != "POST":
            return Match.NONE, {}
        if get_route_path(scope) != CHAT_PATH or not _json_content(scope):
            return Match.NONE, {}
        return Match.FULL, {"path_params": {}, "route": self}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
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


def _json_content(scope: Scope) -> bool:
    """The request's first Content-Type is JSON (FastAPI parses the body of no other as JSON)."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            media: bytes = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json"
    return False

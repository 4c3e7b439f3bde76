"""`POST /tools/{tool_id}/invoke` answered below FastAPI's routing, as `/mcp` is.

FastAPI's route machinery (the included router's match, dependency solving, its request and
response wrappers) cost about a third of an invoke's CPU. `InvokeRoute` sits in the app's route
list ahead of the FastAPI route and takes only the plain case: a POST to a well-formed tool id
that does not ask for a stream. Anything else (a malformed id, `Accept: text/event-stream`,
another method) does not match it and reaches the FastAPI route, which stays the documented one.

The plain case runs the same steps the FastAPI route runs, in the same order, through the same
functions (`authenticate`, `parsed_body`, `InvocationService.invoke`); it is still inside every
middleware (request id, access log, metrics, body limits, CORS), and its errors propagate to the
app's exception handlers like any route's.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import orjson
from starlette._utils import get_route_path
from starlette.requests import Request
from starlette.routing import BaseRoute, Match
from starlette.types import Receive, Scope, Send

from app.api.routing import parsed_body
from app.deps import TenantContext, authenticate, presented_bearer
from app.schemas.invocations import InvokeRequest

if TYPE_CHECKING:
    from app.container import Services

INVOKE_PATH = "/tools/{tool_id}/invoke"
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
        tool_id, body.arguments, body.context_arguments, tenant_id=tenant.id
    )
    return orjson.dumps(result)  # a dataclass


class InvokeRoute(BaseRoute):
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
        tenant = await authenticate(services, presented_bearer(request), client_tokens=False)
        payload = await invoke_json(tenant, scope["path_params"]["tool_id"], request)
        headers = [*_JSON_HEADERS, (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

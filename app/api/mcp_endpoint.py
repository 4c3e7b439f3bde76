"""`/mcp`: each tenant's tools served over MCP (streamable HTTP) with the `mcp` SDK's server.

Stateless: every request carries its bearer (tenant key, client token or an end user's JWT), no
session lives in a process, so any replica answers any request. Responses are JSON, not SSE
streams. `/mcp/{tenant_id}` is this same endpoint with the tenant fixed by the path: a
credential of another tenant is a 401, and the 401 names that tenant's metadata (RFC 9728), so
a client that adds the server by URL finds its authorization server (`app/api/mcp_metadata.py`).

Protocol work only: authenticate, answer each single JSON-RPC request of either protocol era
with one answerer (`McpGateway._answer`) that hands it to the SDK's kernel (`serve_one`, the
function the SDK's own transports run each request through: its per-version validation,
handler lookup and result shaping), and translate between the SDK's handlers and the gateway
service (`app/services/mcp_gateway.py`), which decides what is listed and runs calls. What the
answerer does not take (another content type, a notification, a malformed envelope) goes to the
SDK's streamable-HTTP transport. A tool's failure is an `isError` result; an unknown tool is a
JSON-RPC error (invalid params).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import mcp.types as mcp_types
import orjson
from mcp.server.context import HandlerResult
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import ERROR_CODE_HTTP_STATUS, InboundLadderRejection
from mcp_types import DEFAULT_NEGOTIATED_VERSION
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Message, Receive, Scope, Send

from app.api.hot_routes import send_json
from app.api.leaving import note_client_left
from app.api.mcp_kernel import Exchange, KernelRunners
from app.api.mcp_messages import answer_batch, batch_allowed, method_label
from app.api.mcp_metadata import www_authenticate
from app.api.mcp_modern import accepts_json, modern_route, modern_version, rejection_answer
from app.api.mcp_progress import ProgressStream, progress_params, streamed_progress_token
from app.api.problems import problem_response
from app.deps import TenantContext, authenticate, presented_bearer
from app.errors import AppError, NotFoundError, UnauthorizedError, UnprocessableError
from app.observe.telemetry import mcp_server_span
from app.schemas.tenants import TENANT_ID_PATTERN
from app.services.mcp_gateway import InvalidCursorError

if TYPE_CHECKING:
    from app.container import Services

REQUEST_CANCELLED = -32800  # the SDK's answer to a cancelled request on the 2025 wire
# A call still running this long gets a task that watches for its client leaving; a client
# that leaves a call is noticed at most this late.
WATCH_AFTER_S = 0.02
TENANT_MCP = "/mcp/{tenant_id}"  # the same endpoint, the tenant fixed by the path
CALLER = "toolgate.caller"  # the scope key the handlers read the authenticated caller from
MCP_METHOD = "mcp_method"  # the request state key the access log and metrics read
_TENANT_ID = re.compile(TENANT_ID_PATTERN)


class McpRoute(Route):
    """`/mcp/{tenant_id}`: a route that names itself in the scope, so the access log and the
    metrics label it by its template (never by the tenant's id)."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is not Match.NONE:
            child["route"] = self
        return match, child


def _json_post(scope: Scope) -> bool:
    """A POST with a JSON body, of a known protocol version (or none said)."""
    headers = dict(scope["headers"])
    content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    if scope["method"] != "POST" or content_type != b"application/json":
        return False
    version = headers.get(b"mcp-protocol-version")
    return (
        version is None
        or version.decode("latin-1") in HANDSHAKE_PROTOCOL_VERSIONS
        or (modern_version(scope))
    )


def _parsed(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None  # the SDK answers with its parse error


def _bad_request_id(message: Any) -> bool:
    """A request (it has a method) whose `id` is there but not a string or an integer: MCP
    forbids null, and JSON-RPC numbers with a fraction; the SDK would take it for a
    notification and answer 202 with nothing."""
    if not isinstance(message, dict) or "method" not in message or "id" not in message:
        return False
    request_id = message["id"]
    return not isinstance(request_id, str | int) or isinstance(request_id, bool)


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body already read, then the connection's own messages (a disconnect, in time)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


class _Call:
    """A `tools/call` answered in the request's own task, and why it was stopped, if it was:
    its client left (`gone`) or cancelled it (`cancelled`)."""

    __slots__ = ("_cancelling", "done", "task", "why")

    def __init__(self) -> None:
        self.task = asyncio.current_task()
        self.why: str | None = None
        self.done = False
        self._cancelling = self.task.cancelling() if self.task is not None else 0

    def stop(self, why: str) -> None:
        if self.why is None and not self.done and self.task is not None:
            self.why = why
            self.task.cancel()

    def settle(self) -> bool:
        """Take back this call's cancellation (True), as `asyncio.timeout` does its own."""
        if self.why is None or self.task is None:
            return False
        return self.task.uncancel() <= self._cancelling


async def _stop_when_gone(receive: Receive, call: _Call) -> None:
    """Stops `call` when the client has gone (the request's body is already read)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    call.stop("gone")


def _caller_key(scope: Scope, request_id: Any) -> tuple[Any, ...] | None:
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        return None
    caller: TenantContext = scope[CALLER]
    token = caller.token.token_id if caller.token is not None else None
    return (caller.id, token, type(request_id).__name__, request_id)


async def _no_body() -> Message:
    return {"type": "http.disconnect"}


def _caller(ctx: Any) -> TenantContext:
    request: Request | None = ctx.request
    if request is None or CALLER not in request.scope:
        raise MCPError(mcp_types.INVALID_REQUEST, "not authenticated")
    caller: TenantContext = request.scope[CALLER]
    return caller


class McpGateway:
    """The ASGI endpoint: authenticate, then answer the request (`_answer`) or hand it to the
    SDK's session manager."""

    def __init__(self) -> None:
        self.server: Server[Any] = Server(
            "toolgate",
            version="0.1.0",
            instructions="The tools of one toolgate tenant.",
            on_list_tools=self._list_tools,
        )
        # Registered as a plain request handler, whose result may be the wire dict the kernel
        # validates and shapes for the request's version (`on_call_tool` must build a model,
        # which the kernel dumps before it validates: twice the work; "Tenth round").
        self.server.add_request_handler(
            "tools/call", mcp_types.CallToolRequestParams, self._call_tool
        )
        # `Server.middleware` wraps every request the kernel serves; the SDK's default there is
        # an OpenTelemetry span per message, which, with no tracer configured, was most of a
        # `tools/call`'s CPU here (docs/performance.md, "Ninth round"). The service's own
        # tracing decides whether a call gets a span.
        self.server.middleware = []
        self._manager: StreamableHTTPSessionManager | None = None
        # Requests answered here, by (tenant, client token, JSON-RPC id), to cancel them.
        self._running: dict[tuple[Any, ...], list[_Call]] = {}
        self._kernel = KernelRunners(self.server)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """For the app's lifespan: a fresh manager each time (one cannot be run twice). Its
        task group lives in a task of its own, entered and left there, whichever task runs
        the lifespan's start and end."""
        manager = StreamableHTTPSessionManager(app=self.server, stateless=True, json_response=True)
        ready, stop = asyncio.Event(), asyncio.Event()

        async def serve() -> None:
            async with manager.run():
                ready.set()
                await stop.wait()

        task = asyncio.create_task(serve(), name="mcp-endpoint")
        waiting = asyncio.create_task(ready.wait())
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            waiting.cancel()
            await task  # it failed to start: raise why
        self._manager = manager
        try:
            yield
        finally:
            self._manager = None
            await self._kernel.close()
            stop.set()
            await task

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tenant_id = scope.get("path_params", {}).get("tenant_id")
        await self.serve(scope, receive, send, tenant_id=tenant_id)

    async def serve(
        self, scope: Scope, receive: Receive, send: Send, *, tenant_id: str | None = None
    ) -> None:
        """`/mcp`; with `tenant_id`, the same endpoint for that one tenant (a credential of
        another tenant is refused as not valid here)."""
        services: Services = scope["app"].state.services
        request = Request(scope)
        try:
            if tenant_id is not None and not _TENANT_ID.fullmatch(tenant_id):
                raise NotFoundError("No MCP endpoint here: /mcp/{tenant_id} names a tenant.")
            presented = presented_bearer(request)
            scope[CALLER] = await authenticate(
                services, presented, client_tokens=True, request=request, tenant_id=tenant_id
            )
        except AppError as exc:
            headers = {}
            if isinstance(exc, UnauthorizedError):  # RFC 9728: where to read how to get a token
                sent = bool(request.headers.get("authorization", "").partition(" ")[2].strip())
                headers["WWW-Authenticate"] = www_authenticate(
                    request, token_presented=sent, tenant_id=tenant_id
                )
            response = problem_response(exc.status_code, exc.message, headers=headers)
            await response(scope, receive, send)
            return
        if self._manager is None:
            raise RuntimeError("the MCP endpoint is not running (app lifespan not started)")
        if scope["method"] != "POST":  # stateless: no SSE stream to GET, no session to DELETE
            refused = problem_response(405, "/mcp takes POST only", headers={"Allow": "POST"})
            await refused(scope, receive, send)
            return
        if _json_post(scope):
            body = await _read_body(receive)
            message = _parsed(body)
            scope.setdefault("state", {})[MCP_METHOD] = method_label(message)
            if isinstance(message, list) and batch_allowed(scope):
                await answer_batch(scope, message, send, self._answer, self._cancel)
                return
            if _bad_request_id(message):
                await _invalid_request(scope, send)
                return
            if await self._answered_unless_gone(scope, message, receive, send):
                return
            receive = _replay(body, receive)
        await self._manager.handle_request(scope, receive, send)

    async def _answered_unless_gone(
        self, scope: Scope, message: Any, receive: Receive, send: Send
    ) -> bool:
        """`_answer`, cancelled when the client disconnects before its answer (a tool
        it gave up on stops, and its run is recorded `cancelled`) or when it sends
        `notifications/cancelled` for the request (`_cancel`). The answer runs in this task;
        a call still running after `WATCH_AFTER_S` gets one watcher task that waits for the
        disconnect (two tasks and an `asyncio.wait` per call were about 6% of a `tools/call`;
        a watcher for every call, 3%: most calls end before it would start)."""
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return False
        key = (
            _caller_key(scope, message.get("id")) if message.get("method") == "tools/call" else None
        )
        if key is None:  # nothing worth cancelling
            return await self._answer(scope, message, send)
        call = _Call()
        loop = asyncio.get_running_loop()
        watchers: list[asyncio.Task[None]] = []

        def watch() -> None:
            if not call.done:
                watchers.append(loop.create_task(_stop_when_gone(receive, call)))

        timer = loop.call_later(WATCH_AFTER_S, watch)
        self._running.setdefault(key, []).append(call)
        try:
            answered = await self._answer(scope, message, send)
        except asyncio.CancelledError:
            if call.why is None or not call.settle():
                raise  # cancelled from outside (shutdown): not ours to swallow
        else:
            call.settle()  # stopped as it finished: the answer stands
            return answered
        finally:
            call.done = True
            timer.cancel()
            for watcher in watchers:
                watcher.cancel()
            self._forget(key, call)
        if call.why == "gone":  # the client left: nobody is there to answer (a 499, not a 500)
            note_client_left(scope)
            return True
        error = {"code": REQUEST_CANCELLED, "message": "Request cancelled"}  # as the SDK does
        payload = {"jsonrpc": "2.0", "id": message["id"], "error": error}
        await send_json(send, orjson.dumps(payload))
        return True

    def _forget(self, key: tuple[Any, ...], call: _Call) -> None:
        running = self._running.get(key, [])
        if call in running:
            running.remove(call)
        if not running:
            self._running.pop(key, None)

    def _cancel(self, scope: Scope, message: dict[str, Any]) -> bool:
        """`notifications/cancelled` of a request this process is answering for the same
        credential: cancel it. Ambiguous ids (two requests of one credential sharing an id)
        cancel nothing; a request on another replica is not reached (it ends with its HTTP
        connection instead)."""
        params = message.get("params")
        if not isinstance(params, dict):
            return False
        key = _caller_key(scope, params.get("requestId"))
        running = self._running.get(key, []) if key is not None else []
        if len(running) == 1:
            running[0].stop("cancelled")
        return True

    async def _answer(self, scope: Scope, message: dict[str, Any], send: Send) -> bool:
        """The one answerer of a single JSON-RPC request, in either protocol era: its
        transport checks (2026-07-28: `modern_route`), then the SDK's kernel (`serve_one`, on a
        born-ready connection, as the SDK's stateless transports serve each request), answered
        as JSON, or as SSE when a `tools/call` asked for progress. False (nothing sent): the
        SDK's transport is to answer it (a notification, an envelope it must refuse)."""
        request_id, method, params = message.get("id"), message.get("method"), message.get("params")
        if method == "notifications/cancelled" and "id" not in message:
            if self._cancel(scope, message):
                await Response(status_code=202)(scope, _no_body, send)
                return True
            return False
        request = Request(scope)
        if not _plain_request(message) or not isinstance(method, str):
            return False
        if not accepts_json(request):
            return False  # the SDK's transport answers 406
        modern = modern_version(scope)
        if modern:
            route = await modern_route(request, message, self._input_schema)
            if isinstance(route, InboundLadderRejection):
                payload, status = rejection_answer(route, request_id)
                await send_json(send, orjson.dumps(payload), status)
                return True
            envelope = (route.protocol_version, route.client_info, route.client_capabilities)
        else:  # as the SDK's stateless transport serves the handshake era: born ready
            version = dict(scope["headers"]).get(b"mcp-protocol-version")
            negotiated = version.decode("latin-1") if version else DEFAULT_NEGOTIATED_VERSION
            envelope = (negotiated, None, None)
        exchange = Exchange(request, request_id)
        token = streamed_progress_token(params, scope) if method == "tools/call" else None
        if token is not None:
            return await self._streamed(exchange, token, method, params, envelope, send)
        member = await self._kernel.member(exchange, method, params, envelope)
        error = member.get("error")
        status = ERROR_CODE_HTTP_STATUS.get(error["code"], 200) if modern and error else 200
        await send_json(send, orjson.dumps({"jsonrpc": "2.0", "id": request_id, **member}), status)
        return True

    async def _streamed(
        self,
        exchange: Exchange,
        token: str | int,
        method: str,
        params: Mapping[str, Any] | None,
        envelope: tuple[str, Any, Any],
        send: Send,
    ) -> bool:
        """A call whose progress reports go to an SSE answer, the answer last on it."""
        stream = exchange.stream = ProgressStream(send)
        exchange.progress_token = token
        try:
            member = await self._kernel.member(exchange, method, params, envelope)
        except asyncio.CancelledError:
            if not stream.started:
                raise  # the endpoint answers a cancelled request itself
            member = {"error": {"code": REQUEST_CANCELLED, "message": "Request cancelled"}}
        await stream.finish({"jsonrpc": "2.0", "id": exchange.request_id, **member})
        return True

    async def _list_tools(
        self, ctx: Any, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        caller = _caller(ctx)
        cursor = params.cursor if params is not None else None
        try:
            with mcp_server_span(method="tools/list", target=None, meta=_meta(params)):
                tools, next_cursor = await caller.services.mcp_gateway.list_tools(
                    tenant_id=caller.id, token=caller.token, cursor=cursor
                )
        except InvalidCursorError as exc:
            raise MCPError(mcp_types.INVALID_PARAMS, str(exc)) from None
        except AppError as exc:  # a name offered twice, an unreadable server credential
            raise MCPError(mcp_types.INTERNAL_ERROR, _problem_text(exc)) from None
        return mcp_types.ListToolsResult(tools=tools, next_cursor=next_cursor)

    async def _input_schema(self, request: Request, name: str) -> dict[str, Any] | None:
        """The input schema of the caller's tool `name` as `tools/list` shows it, or None."""
        caller: TenantContext = request.scope[CALLER]
        return await caller.services.mcp_gateway.input_schema(
            name, tenant_id=caller.id, token=caller.token
        )

    async def _call_tool(self, ctx: Any, params: mcp_types.CallToolRequestParams) -> HandlerResult:
        """The SDK's `tools/call` handler: the call run by the gateway, its progress reported
        through the SDK's request context (a no-op unless the client asked for it)."""
        caller = _caller(ctx)
        with mcp_server_span(method="tools/call", target=params.name, meta=_meta(params)):
            return await self._called(caller, params, _progress_reporter(ctx))

    async def _called(
        self, caller: TenantContext, params: mcp_types.CallToolRequestParams, progress: Any
    ) -> HandlerResult:
        try:
            result = await caller.services.mcp_gateway.call_tool(
                params.name,
                dict(params.arguments or {}),
                tenant_id=caller.id,
                token=caller.token,
                progress=progress,
            )
        except NotFoundError:
            raise MCPError(mcp_types.INVALID_PARAMS, f"Unknown tool: {params.name}") from None
        except UnprocessableError as exc:  # a name offered twice
            raise MCPError(mcp_types.INVALID_PARAMS, _problem_text(exc)) from None
        except AppError as exc:  # 429 past the tenant's limits, 502/504 from an MCP server
            return _text_result(exc.message, is_error=True)
        if result.status == "ok" and result.mcp is not None:  # the server's own parts, scrubbed
            return mcp_types.CallToolResult.model_validate(result.mcp)
        if result.status == "ok":
            return _text_result(result.content or "", is_error=False)
        return _text_result(result.error.message if result.error else "the tool failed", True)


def _meta(params: mcp_types.RequestParams | None) -> dict[str, Any] | None:
    """A request's `_meta`, where a client puts its trace context (MCP's conventions)."""
    meta = params.meta if params is not None else None
    return dict(meta) if isinstance(meta, dict) else None


def _progress_reporter(ctx: Any) -> Any:
    """A progress callback for the gateway (each an `app/tools/progress.Progress`), sent as
    `notifications/progress` through the SDK's session; None when none was asked for."""
    token = (ctx.meta or {}).get("progress_token")
    if token is None:
        return None
    count = 0

    async def report(step: Any) -> None:
        nonlocal count
        count += 1
        params = progress_params(token, count, step)
        await ctx.session.report_progress(
            params["progress"], params.get("total"), params.get("message")
        )

    return report


def _plain_request(message: dict[str, Any]) -> bool:
    """A single JSON-RPC 2.0 request with a string or integer id, a method and object params
    (or none); anything else is the SDK's transport's to answer or refuse."""
    request_id, params = message.get("id"), message.get("params")
    return (
        message.get("jsonrpc") == "2.0"
        and isinstance(message.get("method"), str)
        and isinstance(request_id, str | int)
        and not isinstance(request_id, bool)
        and (params is None or isinstance(params, dict))
    )


# What the SDK's `CallToolResult` dumps when only its defaults are set (`resultType`): the base
# of every one-text result.
_RESULT_DEFAULTS = mcp_types.CallToolResult(content=[]).model_dump(
    by_alias=True, mode="json", exclude_none=True
)


def _text_result(text: str, is_error: bool) -> dict[str, Any]:
    """A one-text result as the wire dict `CallToolResult` dumps to; the kernel validates it
    against the request's protocol version as it shapes it (a 2025 answer drops `resultType`)."""
    return {**_RESULT_DEFAULTS, "content": [{"type": "text", "text": text}], "isError": is_error}


def _problem_text(exc: AppError) -> str:
    details = "; ".join(f"{e['path']}: {e['message']}" for e in exc.errors or [])
    return f"{exc.message} ({details})" if details else exc.message


async def _invalid_request(scope: Scope, send: Send) -> None:
    error = {"code": mcp_types.INVALID_REQUEST, "message": "id must be a string or an integer"}
    payload = {"jsonrpc": "2.0", "id": None, "error": error}
    response = Response(orjson.dumps(payload), status_code=400, media_type="application/json")
    await response(scope, _no_body, send)

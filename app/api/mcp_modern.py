"""`/mcp` for 2026-07-28 clients: `server/discover`, `tools/list` and `tools/call` answered
without the SDK's per-request transport, with the SDK's own checks and result shaping.

Why: `mcp.Client` 2.3, fastmcp 4.1, pydantic-ai 2.68 and openai-agents 0.24 speak this era by
default. Through the SDK a `tools/call` cost 3.6-4.3x the CPU of a handshake-era one, most of
it the `Mcp-Param-*` check, which lists every tool of the caller to find one schema.

What stays the SDK's: the checks run here are its functions (`classify_inbound_request`, the
routing-header and `Mcp-Param-*` checks, per-version request validation, result sieving and
the `serverInfo` stamp), in its order; a request any of them refuses, a notification, an
unusual envelope or any other method goes to the SDK, which answers it as before.

Progress: a `tools/call` whose `_meta` carries a `progressToken` (from a client that accepts
`text/event-stream`) is answered on SSE, each progress report a `notifications/progress` event
before the result, as the SDK's own modern transport does when it streams (this endpoint runs
the SDK with JSON answers, which would drop them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, NamedTuple, Protocol

import mcp.types as mcp_types
import orjson
from mcp.server.lowlevel import Server
from mcp.server.runner import modern_error_data
from mcp.server.streamable_http import check_accept_headers
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PARAM_HEADER_PREFIX,
    MCP_PROTOCOL_VERSION_HEADER,
    InboundLadderRejection,
    classify_inbound_request,
    find_duplicated_routing_header,
    validate_mcp_param_headers,
)
from mcp_types import SERVER_INFO_META_KEY
from mcp_types import methods as mcp_methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.types import Scope, Send

from app.api.hot_routes import send_json
from app.api.mcp_progress import answer_with_progress, progress_token

ANSWERED = frozenset({"server/discover", "tools/list", "tools/call"})
_ACCEPT_VALUES_KEPT = 64
_ROUTING_HEADERS = frozenset({MCP_PROTOCOL_VERSION_HEADER, MCP_METHOD_HEADER, MCP_NAME_HEADER})
_VERDICTS_KEPT = 256  # request shapes whose validation verdict is kept
_SHAPE_MAX_BYTES = 2048  # a longer envelope is checked each time, never kept
_PARAM_PREFIX = MCP_PARAM_HEADER_PREFIX.lower()
_PARAM_PREFIX_BYTES = _PARAM_PREFIX.encode()
_READ_HEADERS = frozenset({*(name.encode() for name in _ROUTING_HEADERS), b"accept"})

ListTools = Callable[[Any, Any], Awaitable[mcp_types.ListToolsResult]]


class TextResult(NamedTuple):
    """A call's result that is one text block: what nearly every call returns."""

    text: str
    is_error: bool

    def wire(self, *, modern: bool) -> dict[str, Any]:
        """Its wire form, to the byte as the SDK gives a `CallToolResult` of one `TextContent`:
        sieved for a 2026-07-28 (`modern`) surface, dumped for the handshake era (compared on
        every version in tests/mcp/test_mcp_modern_fast_path.py)."""
        if modern:
            block = {"text": self.text, "type": "text"}  # the sieve's order of the two
        else:
            block = {"type": "text", "text": self.text}
        return {"content": [block], "isError": self.is_error}


class CallTool(Protocol):
    def __call__(
        self, ctx: Any, params: mcp_types.CallToolRequestParams, *, progress: Any = None
    ) -> Awaitable[mcp_types.CallToolResult | TextResult]: ...


InputSchema = Callable[[Request, str], Awaitable[dict[str, Any] | None]]


def listing_params(params: Any) -> mcp_types.PaginatedRequestParams | None:
    """A `tools/list` request's params (its cursor); a ValidationError when they are not."""
    if not params:
        return None
    return mcp_types.PaginatedRequestParams.model_validate(params)


def modern_version(scope: Scope) -> bool:
    """The request names a per-request-envelope (2026-07-28) protocol version."""
    for name, value in scope["headers"]:
        if name == b"mcp-protocol-version":
            return value.decode("latin-1") in MODERN_PROTOCOL_VERSIONS
    return False


class ModernAnswers:
    """The three hot requests of the 2026-07-28 era, answered with `/mcp`'s handlers."""

    def __init__(
        self,
        server: Server[Any],
        *,
        list_tools: ListTools,
        call_tool: CallTool,
        input_schema: InputSchema,
    ) -> None:
        self._server = server
        self._list_tools = list_tools
        self._call_tool = call_tool
        self._input_schema = input_schema
        self._discovered: dict[str, dict[str, Any]] = {}
        # The SDK deep-copies its `serverInfo` stamp on every access so that a caller may
        # mutate it; the answers built here only serialize it: one copy serves them all.
        self._server_stamp = server.server_info_stamp
        self._accept_verdicts: dict[str, bool] = {}
        self._verdicts: dict[tuple[Any, ...], bool] = {}
        self._routes: dict[tuple[Any, ...], str] = {}

    async def answer(self, scope: Scope, message: dict[str, Any], send: Send) -> bool:
        """Answer `message` and return True, or return False (nothing sent) for the SDK."""
        method, params = message.get("method"), message.get("params")
        if method not in ANSWERED or self._server.cache_hints or not _plain_request(message):
            return False
        request = Request(scope)
        # The headers these checks read (the routing headers, Accept, `Mcp-Param-*`) decoded
        # once, as Starlette's `Headers` gives them: each pair, in order, and a mapping of each
        # name to its first value. The SDK's ladder reads the routing headers alone.
        pairs = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in scope["headers"]
            if name in _READ_HEADERS or name.startswith(_PARAM_PREFIX_BYTES)
        ]
        headers: dict[str, str] = {}
        for name, value in pairs:
            headers.setdefault(name, value)
        if not self._accepts_json(request, headers.get("accept", "")):
            return False  # the SDK's 406
        shape = _shape(method, params)
        version = self._ladder(message, pairs, headers, shape)
        if version is None or not self._valid_as(method, version, params, shape):
            return False
        try:
            call = (
                mcp_types.CallToolRequestParams.model_validate(params or {}, by_name=False)
                if method == "tools/call"
                else None
            )
        except ValueError:  # ValidationError is a ValueError
            return False
        if call is not None and await self._param_headers_refused(request, headers, call):
            return False
        token = progress_token(call, scope) if call is not None else None
        if call is not None and token is not None:
            member = partial(self._member, request, method, version, call)
            return await answer_with_progress(send, message["id"], token, member)
        try:
            listing = listing_params(params) if method == "tools/list" else None
        except ValueError:  # ValidationError is a ValueError
            return False
        payload, status = await self._result(request, method, version, call, message["id"], listing)
        await send_json(send, payload, status)
        return True

    async def _param_headers_refused(
        self, request: Request, headers: dict[str, str], call: mcp_types.CallToolRequestParams
    ) -> bool:
        """The SDK's `Mcp-Param-*` check, against the called tool's schema alone (the SDK
        lists every tool of the caller to find it)."""
        arguments = call.arguments or {}
        if not arguments and not any(name.startswith(_PARAM_PREFIX) for name in headers):
            return False
        schema = await self._input_schema(request, call.name)
        if schema is None:
            return False
        return validate_mcp_param_headers(schema, arguments, request.headers) is not None

    async def _result(
        self,
        request: Request,
        method: str,
        version: str,
        call: mcp_types.CallToolRequestParams | None,
        request_id: str | int,
        listing: mcp_types.PaginatedRequestParams | None = None,
    ) -> tuple[bytes, int]:
        member = await self._member(request, method, version, call, listing=listing)
        error = member.get("error")
        status = ERROR_CODE_HTTP_STATUS.get(error["code"], 200) if error is not None else 200
        return orjson.dumps({"jsonrpc": "2.0", "id": request_id, **member}), status

    async def _member(
        self,
        request: Request,
        method: str,
        version: str,
        call: mcp_types.CallToolRequestParams | None,
        progress: Any = None,
        *,
        listing: mcp_types.PaginatedRequestParams | None = None,
    ) -> dict[str, Any]:
        """The JSON-RPC `result` (or `error`) member of the answer; a call's progress reports
        go to `progress`."""
        ctx = _Context(request)
        try:
            if method == "server/discover":
                result = self._discover(version)
            elif call is not None:
                called = await self._call_tool(ctx, call, progress=progress)
                result = self._shaped(method, version, called)
            else:
                result = self._shaped(method, version, await self._list_tools(ctx, listing))
        except Exception as exc:  # the SDK's boundary: MCPError as is, the rest INTERNAL_ERROR
            return {"error": _dumped(modern_error_data(exc))}
        return {"result": result}

    def _discover(self, version: str) -> dict[str, Any]:
        """The SDK's default `server/discover` answer, built once per version (it depends on
        the server's registered handlers only)."""
        if version not in self._discovered:
            result = mcp_types.DiscoverResult(
                supported_versions=list(MODERN_PROTOCOL_VERSIONS),
                capabilities=self._server.get_capabilities(protocol_version=version),
                instructions=self._server.instructions,
            )
            self._discovered[version] = self._shaped("server/discover", version, result)
        cached = self._discovered[version]
        return {**cached, "_meta": {**cached["_meta"], SERVER_INFO_META_KEY: self._stamp()}}

    def _shaped(self, method: str, version: str, result: BaseModel | TextResult) -> dict[str, Any]:
        """The wire form, as the SDK's runner shapes a modern result: sieved by the version's
        surface, `resultType` set, the `serverInfo` stamp in `_meta`."""
        if isinstance(result, TextResult):
            dumped = result.wire(modern=True)
        else:
            fast = text_call_result(result) if method == "tools/call" else None
            dumped = fast if fast is not None else sieved(method, version, result)
        if dumped.get("resultType") is None:
            dumped["resultType"] = "complete"
        meta = dumped.get("_meta")
        if meta is None or (isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None):
            dumped["_meta"] = {**(meta or {}), SERVER_INFO_META_KEY: self._stamp()}
        return dumped

    def _stamp(self) -> dict[str, Any]:
        return self._server_stamp

    def _valid_as(
        self,
        method: str,
        version: str,
        params: dict[str, Any] | None,
        shape: tuple[Any, ...] | None,
    ) -> bool:
        """The SDK's per-version request validation (`validate_client_request`), its verdict
        kept per shape of the params (`shape`, from `_shape`): a call's `arguments` are any
        object on every surface (`dict[str, Any]`), so their values never change it, and a
        client sends the same name and `_meta` again and again (the check was 6-10 us of a
        call)."""
        key = (version, *shape) if shape is not None else None
        verdict = self._verdicts.get(key) if key is not None else None
        if verdict is None:
            try:
                mcp_methods.validate_client_request(method, version, params)
                verdict = True
            except (KeyError, ValueError):  # ValidationError is a ValueError
                verdict = False
            if key is not None:
                if len(self._verdicts) >= _VERDICTS_KEPT:
                    self._verdicts.clear()
                self._verdicts[key] = verdict
        return verdict

    def _ladder(
        self,
        message: dict[str, Any],
        pairs: list[tuple[str, str]],
        headers: dict[str, str],
        shape: tuple[Any, ...] | None,
    ) -> str | None:
        """The protocol version the SDK's ladder (`find_duplicated_routing_header`, then
        `classify_inbound_request`) routes the request by, or None where it refuses it. Its
        verdict is kept per routing headers (each pair, in order) and shape of the params:
        all that either reads."""
        routing = tuple(pair for pair in pairs if pair[0] in _ROUTING_HEADERS)
        key = (routing, *shape) if shape is not None else None
        version = self._routes.get(key) if key is not None else None
        if version is None:
            version = ""  # refused
            if find_duplicated_routing_header(pairs) is None:
                verdict = classify_inbound_request(message, headers=headers)
                if not isinstance(verdict, InboundLadderRejection):
                    version = verdict.protocol_version
            if key is not None:
                if len(self._routes) >= _VERDICTS_KEPT:
                    self._routes.clear()
                self._routes[key] = version
        return version or None

    def _accepts_json(self, request: Request, accept: str) -> bool:
        """The SDK's Accept check (`check_accept_headers`), its verdict kept per header value
        (`accept`, the request's first): clients send the same one or two values on every
        request."""
        verdict = self._accept_verdicts.get(accept)
        if verdict is None:
            verdict = check_accept_headers(request)[0]
            if len(self._accept_verdicts) >= _ACCEPT_VALUES_KEPT:
                self._accept_verdicts.clear()  # a client varying it gets no unbounded dict
            self._accept_verdicts[accept] = verdict
        return verdict


def sieved(method: str, version: str, result: BaseModel) -> dict[str, Any]:
    """`result` validated and sieved by the SDK for `version`'s surface."""
    try:
        return mcp_methods.serialize_server_result(method, version, _dumped(result))
    except ValidationError:
        raise MCPError(mcp_types.INTERNAL_ERROR, "Handler returned an invalid result") from None


def text_call_result(result: BaseModel) -> dict[str, Any] | None:
    """A call's result made of plain text blocks (what nearly every call returns), in the wire
    form `sieved` gives it on every modern surface, without its validate-and-dump round (16 us
    of a call); None for any other result, which `sieved` shapes.

    The two are compared on every modern version, for results of each shape, in
    tests/mcp/test_mcp_modern_fast_path.py."""
    if type(result) is not mcp_types.CallToolResult or not result.model_fields_set <= _TEXT_ONLY:
        return None
    blocks = []
    for block in result.content:
        if type(block) is not mcp_types.TextContent or not block.model_fields_set <= _PLAIN:
            return None
        blocks.append({"text": block.text, "type": "text"})  # the SDK's order of the two
    return {"content": blocks, "isError": result.is_error}


_TEXT_ONLY = frozenset({"content", "is_error"})
_PLAIN = frozenset({"type", "text"})


class _Context:
    """What the handlers read of the SDK's request context."""

    __slots__ = ("request",)

    def __init__(self, request: Request) -> None:
        self.request = request


def _shape(method: str, params: dict[str, Any] | None) -> tuple[Any, ...] | None:
    """What the SDK's checks of a request read of its params: everything but the values of a
    call's `arguments` object (whether there is one, and its type, count); None when that
    cannot be said briefly (arguments not an object, a long envelope): then the SDK checks
    every time."""
    if params is None:
        return (method,)
    if method != "tools/call":  # any other method's params are kept whole
        arguments, rest = None, params
    else:
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            return None
        rest = {name: value for name, value in params.items() if name != "arguments"}
    try:
        shape = orjson.dumps(rest, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return None
    if len(shape) > _SHAPE_MAX_BYTES:
        return None
    return (method, shape, type(arguments).__name__ if "arguments" in params else None)


def _plain_request(message: dict[str, Any]) -> bool:
    """A single JSON-RPC 2.0 request with a string or integer id and object params (or none);
    anything else is the SDK's to answer or refuse."""
    request_id, params = message.get("id"), message.get("params")
    return (
        message.get("jsonrpc") == "2.0"
        and isinstance(request_id, str | int)
        and not isinstance(request_id, bool)
        and (params is None or isinstance(params, dict))
    )


def _dumped(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)

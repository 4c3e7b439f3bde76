"""`/mcp` for 2026-07-28 clients: the checks the SDK's own modern entry makes on a request before
it dispatches it (after the Accept header, `accepts_json`, checked in both eras), each one the
SDK's public function, in its order: each routing header given once
(`find_duplicated_routing_header`), the inbound ladder (`classify_inbound_request`: the
envelope in `_meta` against the headers), and, for a `tools/call`, the `Mcp-Param-*` headers
against the called tool's schema (`validate_mcp_param_headers`; the schema looked up for that
one tool, where the SDK would list every tool of the caller). A request that passes is
answered like every other, in either era, by the endpoint's one answerer through the SDK's
kernel (`app/api/mcp_endpoint.py`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.streamable_http import check_accept_headers
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_PARAM_HEADER_PREFIX,
    InboundLadderRejection,
    InboundModernRoute,
    classify_inbound_request,
    find_duplicated_routing_header,
    validate_mcp_param_headers,
)
from mcp_types import HEADER_MISMATCH
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.types import Scope

_PARAM_PREFIX = MCP_PARAM_HEADER_PREFIX.lower()

# The input schema of the caller's tool `name`, as `tools/list` shows it to that caller.
InputSchema = Callable[[Request, str], Awaitable[dict[str, Any] | None]]


def modern_version(scope: Scope) -> bool:
    """The request names a per-request-envelope (2026-07-28) protocol version."""
    for name, value in scope["headers"]:
        if name == b"mcp-protocol-version":
            return value.decode("latin-1") in MODERN_PROTOCOL_VERSIONS
    return False


def accepts_json(request: Request) -> bool:
    """The SDK's Accept check (both eras): a client that takes no JSON gets its 406."""
    return check_accept_headers(request)[0]


async def modern_route(
    request: Request, message: dict[str, Any], input_schema: InputSchema
) -> InboundModernRoute | InboundLadderRejection:
    """The request's route (its version, client info and capabilities), or the SDK's
    rejection of it."""
    duplicated = find_duplicated_routing_header(request.headers.items())
    if duplicated is not None:
        message_text = f"{duplicated} header appears more than once"
        return InboundLadderRejection(code=HEADER_MISMATCH, message=message_text)
    verdict = classify_inbound_request(message, headers=dict(request.headers))
    if isinstance(verdict, InboundLadderRejection):
        return verdict
    refused = await _param_headers_refused(request, message, input_schema)
    return refused if refused is not None else verdict


async def _param_headers_refused(
    request: Request, message: dict[str, Any], input_schema: InputSchema
) -> InboundLadderRejection | None:
    """The SDK's `Mcp-Param-*` check of a `tools/call`, against the called tool's schema."""
    params = message.get("params") or {}
    name, arguments = params.get("name"), params.get("arguments")
    if message.get("method") != "tools/call" or not isinstance(name, str):
        return None
    if arguments is not None and not isinstance(arguments, dict):
        return None
    if not arguments and not any(header.startswith(_PARAM_PREFIX) for header in request.headers):
        return None  # no value and no header: nothing to disagree
    schema = await input_schema(request, name)
    if schema is None:
        return None  # an unknown tool: the call itself says so
    return validate_mcp_param_headers(schema, arguments or {}, request.headers)


def rejection_answer(
    rejection: InboundLadderRejection, request_id: Any
) -> tuple[dict[str, Any], int]:
    """A ladder rejection as the SDK writes it: its JSON-RPC error, and its HTTP status."""
    error: dict[str, Any] = {"code": rejection.code, "message": rejection.message}
    if rejection.data is not None:
        error["data"] = rejection.data
    status = ERROR_CODE_HTTP_STATUS.get(rejection.code, 200)
    return {"jsonrpc": "2.0", "id": request_id, "error": error}, status

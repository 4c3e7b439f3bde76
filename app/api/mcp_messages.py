"""`/mcp` messages off the hot path: the JSON-RPC method as a metric label, and batches
(protocol 2025-03-26), answered with the endpoint's own direct answers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import mcp.types as mcp_types
import orjson
from starlette.responses import Response
from starlette.types import Message, Scope, Send

BATCH_VERSION = b"2025-03-26"
MAX_BATCH = 20  # messages in one JSON-RPC batch
# The endpoint's direct answer of one message (False: not one it answers), and its cancel.
DirectAnswer = Callable[[Scope, dict[str, Any], Send], Awaitable[bool]]
Cancel = Callable[[Scope, dict[str, Any]], bool]

KNOWN_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "server/discover",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "subscriptions/listen",
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/roots/list_changed",
    }
)


def method_label(message: Any) -> str:
    """The JSON-RPC method as a metric label: a method of the protocol, or `batch`, `response`
    (a client's answer), `other` (a method nobody defined) or `invalid`: never what a client
    made up."""
    if isinstance(message, list):
        return "batch"
    if not isinstance(message, dict):
        return "invalid"
    method = message.get("method")
    if method is None:
        return "response" if "result" in message or "error" in message else "invalid"
    return method if method in KNOWN_METHODS else "other"


def batch_allowed(scope: Scope) -> bool:
    """Batches are answered for clients that negotiated 2025-03-26 (later versions dropped
    them; the SDK answers those with its 400)."""
    version = dict(scope["headers"]).get(b"mcp-protocol-version", b"")
    return bool(version == BATCH_VERSION)


def _rpc_error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


async def answer_batch(
    scope: Scope, batch: list[Any], send: Send, answer: DirectAnswer, cancel: Cancel
) -> None:
    """A JSON-RPC batch (protocol 2025-03-26 has them; the SDK refuses them): its
    `tools/list`, `tools/call` and `ping` requests answered concurrently, as they would be
    one by one, in one JSON array; notifications get no answer (202 when only they came)."""
    if not batch or len(batch) > MAX_BATCH:
        error = {
            "code": mcp_types.INVALID_REQUEST,
            "message": f"a batch holds 1 to {MAX_BATCH} messages",
        }
        payload: Any = {"jsonrpc": "2.0", "id": None, "error": error}
        await Response(orjson.dumps(payload), 400, media_type="application/json")(
            scope, _no_body, send
        )
        return
    answers = await asyncio.gather(*(_batch_answer(scope, m, answer, cancel) for m in batch))
    replies = [reply for reply in answers if reply is not None]
    if not replies:
        await Response(status_code=202)(scope, _no_body, send)
        return
    await Response(orjson.dumps(replies), media_type="application/json")(scope, _no_body, send)


async def _batch_answer(
    scope: Scope, message: Any, answer: DirectAnswer, cancel: Cancel
) -> dict[str, Any] | None:
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return _rpc_error(None, mcp_types.INVALID_REQUEST, "not a JSON-RPC 2.0 message")
    if "id" not in message:  # a notification: no answer
        if message.get("method") == "notifications/cancelled":
            cancel(scope, message)
        return None
    if _bad_request_id(message):
        return _rpc_error(None, mcp_types.INVALID_REQUEST, "id must be a string or an integer")
    if message.get("method") == "ping":
        return {"jsonrpc": "2.0", "id": message["id"], "result": {}}
    body: list[bytes] = []

    async def capture(sent: Message) -> None:
        if sent["type"] == "http.response.body":
            body.append(sent.get("body", b""))

    if await answer(scope, message, capture):
        reply: dict[str, Any] = orjson.loads(b"".join(body))
        return reply
    method = str(message.get("method"))[:100]
    return _rpc_error(
        message["id"], mcp_types.METHOD_NOT_FOUND, f"'{method}' is not answered in a batch"
    )


def _bad_request_id(message: dict[str, Any]) -> bool:
    request_id = message["id"]
    return not isinstance(request_id, str | int) or isinstance(request_id, bool)


async def _no_body() -> Message:
    return {"type": "http.disconnect"}

"""The SDK's kernel as `/mcp` drives it (`app/api/mcp_kernel.py`): connections kept per
envelope, never changed by a handshake, bounded, closed when the endpoint stops."""

from __future__ import annotations

from typing import Any

import mcp.types as mcp_types
from mcp.server.lowlevel import Server
from starlette.requests import Request

from app.api.mcp_kernel import KEPT_ENVELOPES, Exchange, KernelRunners

HANDSHAKE = "2025-06-18"
MODERN = "2026-07-28"


def _kernel() -> KernelRunners:
    """A server whose one method says what the kernel told it about the request's
    connection: the protocol version and the client's name."""

    async def echo(ctx: Any, params: mcp_types.RequestParams) -> dict[str, Any]:
        client = ctx.session.client_params
        return {"version": ctx.protocol_version, "client": client and client.client_info.name}

    server: Server[Any] = Server("test")
    server.middleware = []
    server.add_request_handler("test/echo", mcp_types.RequestParams, echo)
    return KernelRunners(server)


def _exchange() -> Exchange:
    return Exchange(Request({"type": "http", "headers": []}), 1)


async def _echo(kernel: KernelRunners, envelope: tuple[str, Any, Any]) -> dict[str, Any]:
    member = await kernel.member(_exchange(), "test/echo", None, envelope)
    result: dict[str, Any] = member["result"]
    return result


def _client(name: str) -> dict[str, Any]:
    return {"name": name, "version": "1"}


async def test_a_handshake_does_not_change_the_kept_connection() -> None:
    kernel = _kernel()
    assert (await _echo(kernel, (HANDSHAKE, None, None)))["version"] == HANDSHAKE
    params = {
        "protocolVersion": "2025-03-26",
        "capabilities": {},
        "clientInfo": _client("old"),
    }
    answered = await kernel.member(_exchange(), "initialize", params, (HANDSHAKE, None, None))
    assert answered["result"]["protocolVersion"] == "2025-03-26"
    assert await _echo(kernel, (HANDSHAKE, None, None)) == {"version": HANDSHAKE, "client": None}


async def test_each_client_envelope_gets_its_own_connection() -> None:
    kernel = _kernel()
    first = await _echo(kernel, (MODERN, _client("first"), {}))
    second = await _echo(kernel, (MODERN, _client("second"), {}))
    again = await _echo(kernel, (MODERN, {"version": "1", "name": "first"}, {}))  # key order
    assert (first["client"], second["client"], again["client"]) == ("first", "second", "first")
    assert len(kernel) == 2


async def test_kept_connections_are_bounded_and_closed_at_the_end() -> None:
    kernel = _kernel()
    for index in range(KEPT_ENVELOPES + 10):  # a client that changes its name every call
        assert (await _echo(kernel, (MODERN, _client(f"c{index}"), {})))["client"] == f"c{index}"
    assert len(kernel) == KEPT_ENVELOPES
    await kernel.close()
    assert len(kernel) == 0


async def test_an_oversized_envelope_is_served_and_not_kept() -> None:
    kernel = _kernel()
    answered = await _echo(kernel, (MODERN, _client("x" * 5000), {}))
    assert answered["client"] == "x" * 5000
    assert len(kernel) == 0

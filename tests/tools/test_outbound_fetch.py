"""`OutboundClient.fetch`, the one-step exchange external tools use: the same answer, guard,
caps and failures as `request` with `text_capped`, and, without its own read deadline, a call
its caller stops (the tool timeout) leaves nothing behind."""

from __future__ import annotations

import asyncio
import gzip

import pytest

from app.http.client import (
    Fetched,
    OutboundClient,
    OutboundTimeoutError,
    OutboundUnreachableError,
)
from app.http.netguard import OutboundBlockedError, OutboundPolicy
from app.observe.metrics import Metrics
from app.tools.executors import CallScope
from app.tools.executors.external import ExternalExecutor
from app.tools.invocation import InvocationLimits, ToolInvoker
from tests.tools.executors.test_external import _external
from tests.tools.test_outbound_edges import OK, Start, _answering, raw

__all__ = ["raw"]  # the fixture, shared with the edge cases


def _client(*, timeout_s: float = 5, max_connections: int = 200) -> OutboundClient:
    return OutboundClient(
        OutboundPolicy(["127.0.0.1"]),
        timeout_s=timeout_s,
        connect_timeout_s=5,
        max_connections=max_connections,
    )


async def _both(client: OutboundClient, url: str, cap: int) -> tuple[Fetched, Fetched]:
    """The answer through `fetch`, and through `request` with `text_capped`."""
    fetched = await client.fetch("GET", url, cap=cap)
    async with client.request("GET", url) as response:
        text, truncated = await response.text_capped(cap)
    return fetched, Fetched(response.status, response.headers, text, truncated)


@pytest.mark.parametrize(
    ("answer", "cap", "text", "truncated"),
    [
        (OK, 100, "ok", False),
        (b"HTTP/1.1 404 Not Found\r\ncontent-length: 4\r\n\r\nnope", 100, "nope", False),
        (b"HTTP/1.1 302 Found\r\nlocation: /b\r\ncontent-length: 0\r\n\r\n", 100, "", False),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n0123456789", 4, "0123", True),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n",
            100,
            "abc",
            False,
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=latin-1\r\n"
            b"content-length: 1\r\n\r\n\xe9",
            100,
            "\xe9",
            False,
        ),
    ],
    ids=["ok", "404", "redirect-not-followed", "capped", "chunked", "charset"],
)
async def test_fetch_reads_what_request_reads(
    raw: Start, answer: bytes, cap: int, text: str, truncated: bool
) -> None:
    server = await raw(_answering(answer))
    async with _client() as client:
        fetched, requested = await _both(client, f"{server.url}/a", cap)
    assert fetched == requested
    assert (fetched.text, fetched.truncated) == (text, truncated)
    assert server.connections == 1  # each answer read to its end: the connection kept


async def test_a_gzip_bomb_stops_at_the_cap(raw: Start) -> None:
    bomb = gzip.compress(b"\0" * 5_000_000)
    head = b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n" % len(bomb)
    server = await raw(_answering(head + bomb))
    async with _client() as client:
        fetched = await client.fetch("GET", f"{server.url}/a", cap=10_000)
    assert fetched.truncated and fetched.text == "\0" * 10_000


async def test_fetch_keeps_the_guard() -> None:
    async with OutboundClient(OutboundPolicy(), timeout_s=5, connect_timeout_s=5) as client:
        with pytest.raises(OutboundBlockedError):
            await client.fetch("GET", "http://127.0.0.1:8080/a", cap=100)


async def test_a_broken_answer_is_unreachable(raw: Start) -> None:
    server = await raw(_answering(b"HTTP/1.1 200 OK\r\ncontent-length: 1_0\r\n\r\nok"))
    async with _client() as client:
        with pytest.raises(OutboundUnreachableError):
            await client.fetch("GET", f"{server.url}/a", cap=100)


class _Stalled:
    """A raw server's handler that reads the request, says so, and never answers."""

    def __init__(self) -> None:
        self.received = asyncio.Event()

    async def __call__(self, head: bytes, writer: asyncio.StreamWriter) -> bool:
        self.received.set()
        await asyncio.Event().wait()
        return False


async def test_a_call_its_caller_stops_frees_its_slot_and_drops_its_connection(
    raw: Start,
) -> None:
    """Without a read deadline of its own, the caller's deadline (a cancellation) ends the
    exchange: the one connection slot is free again and the half-used connection is never
    given to the next call."""
    stalled = _Stalled()
    slow, fine = await raw(stalled), await raw(_answering(OK))
    async with _client(max_connections=1) as client:
        call = asyncio.create_task(
            client.fetch("GET", f"{slow.url}/a", cap=100, read_deadline=False)
        )
        await stalled.received.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert (await client.fetch("GET", f"{fine.url}/b", cap=100)).text == "ok"
        assert not client._pools[slow.url]._idle  # closed, not kept for another call


async def test_with_its_read_deadline_a_stalled_answer_is_a_timeout(
    raw: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client's own deadline, moved past by the loop's clock rather than waited for."""
    stalled = _Stalled()
    server = await raw(stalled)
    loop = asyncio.get_running_loop()
    async with _client(timeout_s=30) as client:
        call = asyncio.create_task(client.fetch("GET", f"{server.url}/a", cap=100))
        await stalled.received.wait()
        now = loop.time()
        monkeypatch.setattr(loop, "time", lambda: now + 31)
        with pytest.raises(OutboundTimeoutError):
            await call


async def test_a_stalled_external_tool_stops_at_the_tool_timeout(
    raw: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The external executor leaves the answer's deadline to the invoker: a stalled endpoint is
    the invoker's timeout result, its connection is closed and its slot freed."""
    stalled = _Stalled()
    slow, fine = await raw(stalled), await raw(_answering(OK))
    async with _client(max_connections=1) as http:
        invoker = ToolInvoker(
            executors={"external": ExternalExecutor(http=http, response_max_bytes=1000)},
            limits=InvocationLimits(timeout_s=30, output_max_chars=1000),
            metrics=Metrics(),
        )
        loop = asyncio.get_running_loop()
        call = asyncio.create_task(invoker.invoke(_external(f"{slow.url}/a"), {}, CallScope()))
        await stalled.received.wait()
        now = loop.time()
        monkeypatch.setattr(loop, "time", lambda: now + 31)
        result = await call
        monkeypatch.undo()
        assert (result.kind, result.content) == ("timeout", "the tool did not finish within 30 s")
        assert (await http.fetch("GET", f"{fine.url}/b", cap=100)).text == "ok"
        assert not http._pools[slow.url]._idle

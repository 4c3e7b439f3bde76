"""The lean model client's connection handling, against a real socket server on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from app.chat.http_model_client import HTTPModelClient
from tests.support import fake_model as script

ANSWER = script.text("hi")({}).body


async def _one_request_per_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Answer the first request with keep-alive, then drop the connection on the next one."""
    try:
        for index in range(2):
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            await reader.readexactly(length)
            if index == 1:
                break  # a keep-alive close racing the client's reuse of the connection
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: keep-alive\r\n\r\n%s" % (len(ANSWER), ANSWER)
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    writer.close()


@pytest.fixture
async def dropping_server() -> AsyncIterator[str]:
    server = await asyncio.start_server(_one_request_per_connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/v1"
    server.close()
    await server.wait_closed()


async def test_a_connection_dropped_on_reuse_is_replaced_without_backoff(
    dropping_server: str, model_retry_waits: list[float]
) -> None:
    client = HTTPModelClient(base_url=dropping_server, api_key="k", timeout_s=5, max_retries=2)
    try:
        for _ in range(3):
            turn = await client.complete(
                model="m",
                messages=[{"role": "user", "content": "x"}],
                tools=None,
                parallel_tool_calls=True,
            )
            assert turn.content == "hi"
        assert model_retry_waits == []  # replaced at once: no attempt waited for a backoff
    finally:
        await client.close()

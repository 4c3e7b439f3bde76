"""Starting a stdio MCP server (app/mcp/stdio.py): never a fork of the service, never a server
left running, never an unbounded line.

Under uvicorn the service's loop is uvloop, whose own spawn (the SDK's `stdio_client` uses it)
is a real fork() of the whole process made holding the GIL: 250-600 ms stalls of every tenant's
requests at the suite's 5 GB (measured by the loop watchdog in full runs)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import anyio
import pytest
import uvloop
from mcp import StdioServerParameters

from app.mcp import stdio
from app.mcp.client import open_session
from app.mcp.config import McpServer
from tests.support.waiting import within

FORKS: list[int] = []  # every fork() of this process made through Python's fork hooks
os.register_at_fork(before=lambda: FORKS.append(os.getpid()))

DEMO = McpServer(
    name="demo",
    type="stdio",
    source="operator",
    command=sys.executable,
    args=("-m", "tests.support.mcp_demo", "stdio"),
    cwd=str(Path(__file__).parents[2]),
)


@pytest.fixture
def errlog() -> Iterator[TextIO]:
    with open(os.devnull, "w") as devnull:
        yield devnull


async def _tool_names() -> list[str]:
    async with open_session(DEMO, headers={}, policy=None, timeout_s=30) as session:
        listed = await session.list_tools()
    return [tool.name for tool in listed.tools]


def test_a_stdio_server_starts_and_stops_on_uvloop_without_forking_the_service() -> None:
    """Before: one fork per server start (uvloop's spawn); its cost grows with the process."""
    before = len(FORKS)
    assert "add" in uvloop.run(_tool_names())
    assert FORKS[before:] == []


async def test_a_start_whose_caller_leaves_stops_the_server_it_started(
    monkeypatch: pytest.MonkeyPatch, errlog: TextIO
) -> None:
    """The caller is cancelled while the server is being started on its thread: the server
    that start then makes is stopped and reaped."""
    started: list[subprocess.Popen[bytes]] = []
    on_thread, go_on = threading.Event(), threading.Event()

    def popen(params: StdioServerParameters, errlog: Any) -> subprocess.Popen[bytes]:
        on_thread.set()
        go_on.wait(10)  # held until the caller has left
        started.append(stdio_popen(params, errlog))
        return started[-1]

    stdio_popen = stdio._popen
    monkeypatch.setattr(stdio, "_popen", popen)
    monkeypatch.setattr(stdio, "EXIT_WAIT_S", 0.2)
    params = StdioServerParameters(
        command=sys.executable, args=["-c", "import time; time.sleep(60)"]
    )
    starting = asyncio.create_task(stdio._spawn(params, errlog))
    await within(on_thread.is_set, 10)
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    go_on.set()
    await within(lambda: bool(started) and started[0].returncode is not None, 10)
    await within(lambda: not stdio._STOPPING, 10)  # stopped and reaped, nothing left behind


async def test_a_line_longer_than_the_bound_ends_the_session(
    monkeypatch: pytest.MonkeyPatch, errlog: TextIO
) -> None:
    monkeypatch.setattr(stdio, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(stdio, "EXIT_WAIT_S", 0.2)
    endless = "import sys, time; sys.stdout.write('x' * 5000); sys.stdout.flush(); time.sleep(60)"
    params = StdioServerParameters(command=sys.executable, args=["-c", endless])
    async with stdio.stdio_transport(params, errlog) as (read, _):
        first = await read.receive()
        assert isinstance(first, ValueError) and "too long" in str(first)
        assert [message async for message in read] == []  # and then nothing: it ended


async def test_a_server_that_is_not_json_rpc_gives_errors_not_a_crash(errlog: TextIO) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-c", "print('hello'); print('{\"jsonrpc\": 1}')"]
    )
    async with stdio.stdio_transport(params, errlog) as (read, _):
        received = [message async for message in read]
    assert len(received) == 2 and all(isinstance(m, ValueError) for m in received)


class Chunks(asyncio.StreamReader):
    """A server's stdout as the reader gets it, read by read (a pipe would merge them)."""

    def __init__(self, *chunks: bytes) -> None:
        super().__init__()
        self.chunks = list(chunks)

    async def read(self, n: int = -1) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


async def test_messages_split_across_reads_or_sharing_one_arrive_whole() -> None:
    note = b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": %d}}'
    one, two, three = note % 1, note % 2, note % 3
    half = len(one) // 2
    reads = Chunks(one[:half], one[half:] + b"\n" + two + b"\n" + three[:9], three[9:] + b"\n")
    incoming, received = anyio.create_memory_object_stream[Any](10)
    params = StdioServerParameters(command="server")
    await stdio._read(reads, incoming, params)
    async with received:
        messages = [message async for message in received]
    assert [m.message.params["data"] for m in messages] == [1, 2, 3]

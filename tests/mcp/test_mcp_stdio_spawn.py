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
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

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
    started: list[subprocess.Popen[bytes]] = []

    def popen(params: StdioServerParameters, errlog: Any) -> subprocess.Popen[bytes]:
        started.append(stdio_popen(params, errlog))
        return started[-1]

    stdio_popen = stdio._popen
    monkeypatch.setattr(stdio, "_popen", popen)
    monkeypatch.setattr(stdio, "EXIT_WAIT_S", 0.2)
    params = StdioServerParameters(
        command=sys.executable, args=["-c", "import time; time.sleep(60)"]
    )
    starting = asyncio.create_task(stdio._spawn(params, errlog))
    await asyncio.sleep(0)  # under way on its thread
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    await within(lambda: bool(started) and started[0].returncode is not None, 10)
    assert not stdio._STOPPING  # stopped and reaped, nothing left behind


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


async def test_messages_split_across_reads_or_sharing_one_arrive_whole(errlog: TextIO) -> None:
    note = '{"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": %d}}'
    script = (
        "import sys, time\n"
        f"note = {note!r}\n"
        "half = len(note % 1) // 2\n"
        "sys.stdout.write((note % 1)[:half]); sys.stdout.flush(); time.sleep(0.05)\n"
        "sys.stdout.write((note % 1)[half:] + '\\n' + (note % 2) + '\\n' + (note % 3)[:9])\n"
        "sys.stdout.flush(); time.sleep(0.05)\n"
        "sys.stdout.write((note % 3)[9:] + '\\n')\n"
    )
    params = StdioServerParameters(command=sys.executable, args=["-c", script])
    async with stdio.stdio_transport(params, errlog) as (read, _):
        received = [message async for message in read]
    assert [m.message.params["data"] for m in received] == [1, 2, 3]  # type: ignore[union-attr]

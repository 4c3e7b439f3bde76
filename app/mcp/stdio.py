"""Starting a stdio MCP server without forking the service.

The SDK's `stdio_client` starts the server with the event loop's `subprocess_exec`. Under
uvicorn that loop is uvloop, whose spawn is a real `fork()` of the whole service process, made
on the loop's thread and holding the GIL, while every request of every tenant waits (measured:
docs/performance.md, "Why the code is shaped as it is"; tests/mcp/test_mcp_stdio_spawn.py).
Here the server is started by `subprocess.Popen` on a worker thread (vfork and exec: the GIL is
held only until the child execs, whatever the service's size) and its pipes are served on the
loop. The rest is the SDK's: its message types, its default environment, and its shutdown order
(close stdin, wait, SIGTERM to the server's process group, wait, SIGKILL).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from typing import TextIO

import anyio
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import StdioServerParameters
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

logger = logging.getLogger("app.mcp.stdio")

EXIT_WAIT_S = 2.0  # after stdin closes, then again after SIGTERM (the SDK's figures)
POLL_S = 0.02
READ_BYTES = 1 << 16
# One message from a server, at most: a line longer than this ends the session (bounded memory).
MAX_LINE_BYTES = 64 << 20

Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]


@contextlib.asynccontextmanager
async def stdio_transport(params: StdioServerParameters, errlog: TextIO) -> AsyncIterator[Streams]:
    """The server's messages and a stream for ours, as the SDK's `stdio_client` yields them; the
    server is stopped (and reaped) on exit, however the block ends."""
    process = await _spawn(params, errlog)
    try:
        loop = asyncio.get_running_loop()
        assert process.stdin is not None and process.stdout is not None
        reader = asyncio.StreamReader(limit=READ_BYTES)
        stdout, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), process.stdout
        )
        stdin, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, process.stdin
        )
    except BaseException:
        with anyio.CancelScope(shield=True):  # a cancelled scope would cut the stop short
            await _stop(process)
        raise
    writer = asyncio.StreamWriter(stdin, protocol, None, loop)
    incoming, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, outgoing = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_read, reader, incoming, params)
            tasks.start_soon(_write, outgoing, writer, incoming, params)
            try:
                yield read_stream, write_stream
            finally:
                if process.poll() is not None:  # not stopped by us: say so, with its code
                    logger.warning(
                        "MCP server %s exited on its own (code %d): its session ended",
                        params.command,
                        process.returncode,
                    )
                with anyio.CancelScope(shield=True):
                    write_stream.close()
                    stdin.close()  # EOF on the server's stdin: its cue to exit
                    await _stop(process)
                tasks.cancel_scope.cancel()
    finally:
        stdout.close()
        for stream in (read_stream, write_stream, incoming, outgoing):
            stream.close()


async def _spawn(params: StdioServerParameters, errlog: TextIO) -> subprocess.Popen[bytes]:
    """The server process, started on a worker thread; if the caller is cancelled meanwhile,
    the process is stopped once it exists (never left running)."""
    spawn = asyncio.get_running_loop().run_in_executor(None, _popen, params, errlog)
    try:
        return await asyncio.shield(spawn)
    except asyncio.CancelledError:
        spawn.add_done_callback(_stop_when_spawned)
        raise


def _popen(params: StdioServerParameters, errlog: TextIO) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [params.command, *params.args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=errlog,
        env=get_default_environment() | (params.env or {}),
        cwd=params.cwd,
        start_new_session=True,  # its own process group: stopped with its children
    )


_STOPPING: set[asyncio.Task[None]] = set()  # stops of servers whose starter left (kept alive)


def _stop_when_spawned(spawn: asyncio.Future[subprocess.Popen[bytes]]) -> None:
    if not spawn.cancelled() and spawn.exception() is None:
        task = asyncio.ensure_future(_stop(spawn.result()))
        _STOPPING.add(task)
        task.add_done_callback(_STOPPING.discard)


async def _read(
    reader: asyncio.StreamReader,
    incoming: MemoryObjectSendStream[SessionMessage | Exception],
    params: StdioServerParameters,
) -> None:
    """Each line of the server's stdout, parsed; a line past MAX_LINE_BYTES ends the session."""
    buffer, scanned = bytearray(), 0  # bytes before `scanned` hold no newline
    async with incoming:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            while chunk := await reader.read(READ_BYTES):
                buffer += chunk  # each byte copied and searched once, however long the line
                start = 0
                while (end := buffer.find(b"\n", scanned)) >= 0:
                    await incoming.send(_parse(bytes(buffer[start:end]), params))
                    start = scanned = end + 1
                del buffer[:start]
                scanned = len(buffer)
                if len(buffer) > MAX_LINE_BYTES:
                    logger.error(
                        "MCP server %s sent a message longer than %d bytes: session closed",
                        params.command,
                        MAX_LINE_BYTES,
                    )
                    await incoming.send(ValueError("the server's message is too long"))
                    return


def _parse(line: bytes, params: StdioServerParameters) -> SessionMessage | Exception:
    try:
        text = line.decode(params.encoding, params.encoding_error_handler)
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False))
    except ValueError as exc:
        logger.warning("MCP server %s sent a line that is not JSON-RPC: %s", params.command, exc)
        return exc


async def _write(
    outgoing: MemoryObjectReceiveStream[SessionMessage],
    writer: asyncio.StreamWriter,
    incoming: MemoryObjectSendStream[SessionMessage | Exception],
    params: StdioServerParameters,
) -> None:
    """Our messages to the server's stdin; a server that stops reading ends the session."""
    try:
        async with outgoing:
            async for message in outgoing:
                text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                writer.write((text + "\n").encode(params.encoding, params.encoding_error_handler))
                await writer.drain()
    except (ConnectionError, anyio.ClosedResourceError, anyio.BrokenResourceError):
        incoming.close()  # the session sees the end instead of waiting on a reply


async def _stop(process: subprocess.Popen[bytes]) -> None:
    """Wait for the server to exit; past EXIT_WAIT_S, SIGTERM its process group, and past it
    again SIGKILL; reaped either way (no zombie left)."""
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
        deadline = anyio.current_time() + EXIT_WAIT_S
        # Polled: no child watcher tells of its exit (it was not started by the loop), and a
        # thread blocked in wait() per server would take the default executor's few threads.
        while process.poll() is None and anyio.current_time() < deadline:  # noqa: ASYNC110
            await anyio.sleep(POLL_S)
        if process.returncode is not None:
            break
    if process.returncode is None:
        logger.error("MCP server process %d is still alive after SIGKILL", process.pid)
    else:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # children left in its group
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            pipe.close()

"""A local REST API for the benchmark's external-tool rows: one small JSON answer per request,
kept-alive connections, request bodies framed by Content-Length read and dropped.

It stands in for an API on another machine, so it is written on asyncio's protocol layer (on
uvloop) rather than a web framework: on a machine whose cores it shares with the service, the
driver and the fake model, its own work should disturb the service's as little as it can. The
aiohttp application it replaced cost 0.15-0.25 ms of CPU a request, as much as the service's
`/ping`. Its CPU is still measured and reported apart from the service's."""

from __future__ import annotations

import argparse
import asyncio
from typing import cast

import uvloop

ANSWER = b'{"temperature_c": 21.5, "conditions": "clear", "city": "Oslo"}'
RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(ANSWER),
    ANSWER,
)
MAX_HEAD_BYTES = 64 * 1024


def body_length(head: bytes) -> int:
    """The request's Content-Length (0 without one); ValueError when it is not a number."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


class Api(asyncio.Protocol):
    """Answers each request on the connection with `RESPONSE`, in order."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.pending = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.pending += data
        while (end := self.pending.find(b"\r\n\r\n")) >= 0:
            try:
                length = body_length(self.pending[:end])
            except ValueError:
                self.transport.close()
                return
            if len(self.pending) < end + 4 + length:
                return  # the body is still on its way
            self.pending = self.pending[end + 4 + length :]
            self.transport.write(RESPONSE)
        if len(self.pending) > MAX_HEAD_BYTES:
            self.transport.close()


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Api, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvloop.run(serve(args.port))


if __name__ == "__main__":
    main()

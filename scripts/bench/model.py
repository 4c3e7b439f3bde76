"""The benchmark's fake model: the answers of `python -m app fake-model` (`FakeModelApp`: a
tool call while the last message is the user's, then text; the options in the model name, such
as `fake-calls-3-ms-200`), served on asyncio's protocol layer (on uvloop).

The model stands in for a service on another machine; on this one it shares the cores of the
service and of the naive loop it serves. Under uvicorn it cost about 0.1 ms of CPU a call, as
much as the driver's work for a chat: with the service on a core of its own and the load on
the other, the load's core, not the service, was then what held the chats back, and the
service's CPU per call rose with its idle wake-ups (0.2 to 0.38 ms per model iteration
between rounds of one run). Requests are read whole (Content-Length; a chunked body closes the
connection), one at a time per connection, and answered in order."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any, cast

import orjson
import uvloop

from app.chat.fake_model import FakeModelApp, _api_of, _as_chat, _model_option, _shaped

MAX_REQUEST_BYTES = 16 * 1024 * 1024


def _head(data: bytes) -> tuple[str, int]:
    """(path, Content-Length) of a request head; ValueError when the body is not so framed."""
    lines = data.split(b"\r\n")
    path = lines[0].split(b" ")[1].decode("latin-1")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"transfer-encoding":
            raise ValueError("only bodies framed by Content-Length")
    return path, length


class Model(asyncio.Protocol):
    def __init__(self, app: FakeModelApp) -> None:
        self.app = app
        self.transport: asyncio.Transport | None = None
        self.pending = b""
        self.busy = False  # an answer is on its way (a model latency): the next request waits

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.pending += data
        self._serve()

    def _serve(self) -> None:
        assert self.transport is not None
        while not self.busy and (end := self.pending.find(b"\r\n\r\n")) >= 0:
            try:
                path, length = _head(self.pending[:end])
            except (ValueError, IndexError):
                self.transport.close()
                return
            if len(self.pending) < end + 4 + length:
                break  # the body is still on its way
            body = self.pending[end + 4 : end + 4 + length]
            self.pending = self.pending[end + 4 + length :]
            try:
                request: dict[str, Any] = orjson.loads(body) if body else {}
            except orjson.JSONDecodeError:
                self.transport.close()  # not a model request: nothing to answer
                return
            api = _api_of(path)
            payload = orjson.dumps(_shaped(api, self.app.answer(_as_chat(api, request))))
            latency_s = _model_option(request, "ms", self.app.latency_s * 1000) / 1000
            self.app.served += 1
            if latency_s:
                self.busy = True
                asyncio.get_running_loop().call_later(latency_s, self._send, payload)
            else:
                self._send(payload)
        if len(self.pending) > MAX_REQUEST_BYTES:
            self.transport.close()

    def _send(self, payload: bytes) -> None:
        assert self.transport is not None
        if self.transport.is_closing():
            return
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
        self.transport.write(head % len(payload) + payload)
        if self.busy:
            self.busy = False
            self._serve()


async def serve(port: int, app: FakeModelApp) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Model(app), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tool", default="roll_dice")
    parser.add_argument("--arguments", default=json.dumps({"d": 6}))
    args = parser.parse_args()
    app = FakeModelApp(tool=args.tool, arguments=args.arguments, calls=1, latency_s=0.0)
    uvloop.run(serve(args.port, app))


if __name__ == "__main__":
    main()
